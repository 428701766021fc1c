"""Bounded resources and the cost of hardening, measured beside a baseline checkout.

Each measurement runs in a fresh child process, once with this checkout and once with a
baseline checkout (``--baseline``, default ``/work/main``: the code before the hardening),
and reports wall time and peak memory (``ru_maxrss`` from ``os.wait4``):

* **plan speed**: ``make_plan`` of ``sample_graphs/gpt2-b1-t128-steady.json.gz`` (frozen
  graph tables must not slow the planner), median of three runs in one process;
* **graph loading**: peak RSS growth while loading a large graph (the GPT-2 sample copied
  ``--copies`` times, disjoint), against its decompressed JSON size;
* **refused inputs**: peak RSS of ``roam info`` on a gzip bomb over the default 2 GiB cap
  (the baseline decompresses it before refusing), on ``/dev/zero`` and on a FIFO (this
  checkout only: the baseline reads ``/dev/zero`` until memory runs out and blocks on a FIFO);
* **snapshot analysis**: a snapshot of many segments and blocks (quadratic in the baseline);
* **layout time limit**: ``roam layout`` on random MiniMalloc problems with ``--time-limit``
  (the baseline on the smaller one only, under a timeout).

Writes ``benchmarks/results/hardening.md`` and ``.json`` with the date and the machine load.

Run: ``PYTHONPATH=$PWD python benchmarks/hardening_bench.py [--quick]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import os
import pickle
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
GPT2 = REPO / "sample_graphs" / "gpt2-b1-t128-steady.json.gz"


def measured(argv: list[str], root: Path, timeout_s: float = 900.0) -> dict[str, Any]:
    """Wall time, peak RSS and exit status of one child, started through ``/usr/bin/time``
    (a small process: a child forked from this one would start with its peak as its own)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    t0 = time.monotonic()
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss_file:
        p = subprocess.Popen(["/usr/bin/time", "-f", "%M", "-o", rss_file.name, *argv],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=root,
                             start_new_session=True)
        try:
            out, err = p.communicate(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)  # time and the command under it
            out, err = p.communicate()
            timed_out = True
        text = rss_file.read().strip().splitlines()
    rss = int(text[-1]) / 1024 if text and text[-1].isdigit() else float("nan")
    last = out.decode(errors="replace").strip().splitlines()
    data: dict[str, Any] = {}
    if last and last[-1].startswith("{"):
        try:
            data = json.loads(last[-1])
        except json.JSONDecodeError:
            pass
    errs = [ln for ln in err.decode(errors="replace").strip().splitlines()
            if not ln.startswith("Command exited with non-zero status")]
    return {"seconds": round(time.monotonic() - t0, 2), "rss_mib": round(rss, 1),
            "status": p.returncode, "timed_out": timed_out, "out": (last or [""])[-1][:300],
            "error": errs[-1:] or [""], **data}

PLAN_SPEED = """
import json, statistics, time, roam_core as rc
ts = []
for _ in range(3):
    g = rc.load_graph({path!r})
    t = time.perf_counter()
    p = rc.make_plan(g, rc.PlannerConfig(workers=1))
    ts.append(time.perf_counter() - t)
print(json.dumps({{"plan_s": round(statistics.median(ts), 3), "peak": p.planned_peak_bytes,
                  "arena": p.arena_bytes}}))
"""

LOAD = """
import json, resource, time, roam_core as rc
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
g = rc.load_graph({path!r})
dt = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({{"load_s": round(dt, 2), "ops": len(g.ops),
                  "growth_mib": round((peak - base) / 1024, 1)}}))
"""

SNAPSHOT = """
import json, time
from roam_core.formats.snapshot_analysis import analyze_snapshot
data = open({path!r}, "rb").read()
t = time.perf_counter()
m = analyze_snapshot(data, max_bytes=1 << 31)
print(json.dumps({{"analyze_s": round(time.perf_counter() - t, 2),
                  "segments": len(m.segments)}}))
"""


def big_graph(copies: int, out: Path) -> int:
    """The GPT-2 sample copied ``copies`` times under prefixed ids; the JSON's size."""
    src = json.loads(gzip.decompress(GPT2.read_bytes()))

    def ren(x: Any, k: int) -> Any:
        return None if x is None else f"c{k}.{x}"

    g = {k: v for k, v in src.items() if k not in ("ops", "tensors", "aliases",
                                                    "control_edges", "outputs")}
    g.update(ops=[], tensors=[], aliases=[], control_edges=[], outputs=[])
    for k in range(copies):
        for o in src["ops"]:
            g["ops"].append({**o, "id": ren(o["id"], k),
                             **{f: [ren(x, k) for x in o.get(f, [])]
                                for f in ("inputs", "outputs", "mutates")}})
        for t in src["tensors"]:
            t2 = {**t, "id": ren(t["id"], k), "producer": ren(t.get("producer"), k)}
            t2.pop("consumers", None)
            g["tensors"].append(t2)
        g["aliases"] += [{"id": ren(a["id"], k), "storage": ren(a["storage"], k),
                          "producer": ren(a.get("producer"), k)} for a in src["aliases"]]
        g["control_edges"] += [{"src": ren(e["src"], k), "dst": ren(e["dst"], k),
                                "reason": e["reason"]} for e in src["control_edges"]]
        g["outputs"] += [ren(x, k) for x in src["outputs"]]
    raw = json.dumps(g, separators=(",", ":")).encode()
    out.write_bytes(raw)
    return len(raw)


def bomb(out: Path, n_bytes: int) -> None:
    """A gzip file expanding to ``n_bytes`` zero bytes, written in chunks."""
    chunk = b"0" * (1 << 24)
    with gzip.open(out, "wb", compresslevel=9) as f:
        for _ in range(n_bytes // len(chunk) + 1):
            f.write(chunk)


def snapshot(out: Path, segments: int, blocks_per: int) -> None:
    """A snapshot with ``segments`` segments of ``blocks_per`` live blocks each."""
    segs, trace = [], []
    for s in range(segments):
        base = s << 24
        blocks = [{"address": base + b * 1024, "size": 1024, "state": "active_allocated"}
                  for b in range(blocks_per)]
        segs.append({"device": 0, "address": base, "total_size": 1 << 24, "blocks": blocks})
    trace = [{"action": "alloc", "addr": 1 << 40, "size": 512, "frames": []},
             {"action": "free_completed", "addr": 1 << 40, "size": 512, "frames": []}]
    out.write_bytes(pickle.dumps({"segments": segs, "device_traces": [trace]}))


def dsa_csv(out: Path, n: int) -> None:
    """Random MiniMalloc rows (lifetimes up to 200 steps, sizes up to 64 KiB)."""
    rng = random.Random(0)
    with open(out, "w") as f:
        f.write("id,lower,upper,size\n")
        for i in range(n):
            lo = rng.randrange(0, n)
            f.write(f"b{i},{lo},{lo + rng.randrange(1, 200)},{rng.randrange(1, 1 << 16)}\n")


def machine() -> dict[str, Any]:
    return {"date": dt.date.today().isoformat(), "nproc": os.cpu_count(),
            "loadavg": [round(x, 2) for x in os.getloadavg()], "python": sys.version.split()[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--baseline", default="/work/main", help="checkout to compare with")
    ap.add_argument("--copies", type=int, default=40, help="GPT-2 copies in the big graph")
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows of the big DSA problem")
    ap.add_argument("--quick", action="store_true", help="smaller inputs")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    a = ap.parse_args()
    if a.quick:
        a.copies, a.rows = 4, 50_000
    base, here = Path(a.baseline), REPO
    res: dict[str, Any] = {"machine_before": machine(), "baseline": str(base)}
    py = sys.executable
    with tempfile.TemporaryDirectory(prefix="roam-hardening-") as tmp:
        d = Path(tmp)
        res["plan_speed"] = {name: measured([py, "-c", PLAN_SPEED.format(path=str(GPT2))], root)
                             for name, root in (("baseline", base), ("hardened", here))}
        gpath = d / "big.json"
        res["graph_json_mib"] = round(big_graph(a.copies, gpath) / 2**20, 1)
        res["load"] = {name: measured([py, "-c", LOAD.format(path=str(gpath))], root)
                       for name, root in (("baseline", base), ("hardened", here))}
        gpath.unlink()
        b = d / "bomb.json.gz"
        bomb(b, (2 << 30) + (16 << 20))
        res["bomb_file_mib"] = round(b.stat().st_size / 2**20, 2)
        res["bomb"] = {name: measured([py, "-m", "roam_core", "info", str(b)], root)
                       for name, root in (("baseline", base), ("hardened", here))}
        fifo = d / "fifo"
        os.mkfifo(fifo)
        res["dev_zero"] = measured([py, "-m", "roam_core", "info", "/dev/zero"], here, 120)
        res["fifo"] = measured([py, "-m", "roam_core", "info", str(fifo)], here, 120)
        snap = d / "snap.pickle"
        snapshot(snap, 400 if not a.quick else 100, 400 if not a.quick else 100)
        res["snapshot_mib"] = round(snap.stat().st_size / 2**20, 1)
        res["snapshot"] = {name: measured([py, "-c", SNAPSHOT.format(path=str(snap))], root,
                                          900)
                           for name, root in (("baseline", base), ("hardened", here))}
        res["layout"] = _layouts(d, a, base, here)
    res["machine_after"] = machine()
    out = Path(a.out)
    (out / "hardening.json").write_text(json.dumps(res, indent=1) + "\n")
    (out / "hardening.md").write_text(markdown(res))
    print(markdown(res))


def _layouts(d: Path, a: argparse.Namespace, base: Path, here: Path) -> list[dict[str, Any]]:
    py = sys.executable
    rows: list[dict[str, Any]] = []
    small = max(a.rows // 5, 1000)
    for n, limit, who in ((small, 5, "baseline"), (small, 5, "hardened"),
                          (a.rows, 5, "hardened"), (a.rows, 30, "hardened")):
        csv = d / f"dsa{n}.csv"
        if not csv.exists():
            dsa_csv(csv, n)
        root = base if who == "baseline" else here
        r = measured([py, "-m", "roam_core", "layout", str(csv), "-o", str(d / "o.csv"),
                      "--time-limit", str(limit)], root, 600)
        line = r["out"] if r["status"] == 0 else r.get("error", [""])[0]
        rows.append({"rows": n, "time_limit_s": limit, "code": who, **r, "line": line})
    return rows


def _r(x: dict[str, Any], key: str) -> Any:
    return x.get(key, "")


def markdown(res: dict[str, Any]) -> str:
    m0, m1 = res["machine_before"], res["machine_after"]
    ps, ld = res["plan_speed"], res["load"]
    lines = [
        "# Hardening: bounded resources and the cost of the checks",
        "",
        f"Measured {m0['date']} on {m0['nproc']} CPUs, load average {m0['loadavg']} before "
        f"and {m1['loadavg']} after (the machine is shared with other developers: timings are "
        f"noisy). Baseline: `{res['baseline']}` (the code before this work), each measurement "
        "in a fresh child process; peak memory is the child's `ru_maxrss`. Written by "
        "`benchmarks/hardening_bench.py`.",
        "",
        "## Planner speed with frozen graph tables",
        "",
        "| code | make_plan gpt2-b1-t128 (median of 3) | planned peak | arena |",
        "|---|---:|---:|---:|",
    ]
    for k in ("baseline", "hardened"):
        lines.append(f"| {k} | {_r(ps[k], 'plan_s')} s | {_r(ps[k], 'peak')} | "
                     f"{_r(ps[k], 'arena')} |")
    mib = res["graph_json_mib"]
    lines += ["", f"## Loading a {mib} MiB graph (JSON)", "",
              "| code | ops | load s | RSS growth MiB | growth / JSON size |",
              "|---|---:|---:|---:|---:|"]
    for k in ("baseline", "hardened"):
        g = _r(ld[k], "growth_mib")
        ratio = f"{g / mib:.2f}x" if isinstance(g, float) else ""
        lines.append(f"| {k} | {_r(ld[k], 'ops')} | {_r(ld[k], 'load_s')} | {g} | {ratio} |")
    lines += ["", "## Refused inputs (`roam info`)", "",
              "| input | code | exit | seconds | peak RSS MiB | message |",
              "|---|---|---:|---:|---:|---|"]
    for k in ("baseline", "hardened"):
        r = res["bomb"][k]
        lines.append(f"| gzip bomb ({res['bomb_file_mib']} MiB, 2.02 GiB of zeros) | {k} | "
                     f"{r['status']} | {r['seconds']} | {r['rss_mib']} | {r['error'][0][:90]} |")
    for name in ("dev_zero", "fifo"):
        r = res[name]
        lines.append(f"| {name} | hardened | {r['status']} | {r['seconds']} | {r['rss_mib']} |"
                     f" {r['error'][0][:90]} |")
    lines += ["", f"## Snapshot analysis ({res['snapshot_mib']} MiB pickle, many segments "
              "and blocks)", "", "| code | analyse s | peak RSS MiB |", "|---|---:|---:|"]
    for k in ("baseline", "hardened"):
        r = res["snapshot"][k]
        lines.append(f"| {k} | {_r(r, 'analyze_s') or ('timeout' if r['timed_out'] else '')} "
                     f"| {r['rss_mib']} |")
    lines += ["", "## `roam layout --time-limit` on random MiniMalloc problems", "",
              "| rows | --time-limit | code | wall s (read, solve, validate, write) | peak RSS "
              "MiB | result |", "|---:|---:|---|---:|---:|---|"]
    for r in res["layout"]:
        status = "timeout" if r["timed_out"] else r["status"]
        lines.append(f"| {r['rows']:,} | {r['time_limit_s']} | {r['code']} | {r['seconds']} | "
                     f"{r['rss_mib']} | {status}: {r['line'][:110]} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
