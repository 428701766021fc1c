"""The fuzz corpus through everything, counted: ``benchmarks/results/fuzz.md``.

Runs the corpus of ``tests/fuzz/corpus.py`` (bad graphs, plans, CSVs, snapshots) through

* every command as a user runs it (``python -m roam_core``; :func:`tests.fuzz.runner.matrix`:
  each bad graph through info, plan, plan --budget, check, report, frontier, execute, bench
  and serve; each bad or false plan through check, report and execute; each bad CSV through
  layout; bad options and output paths), measuring each child's peak memory;
* every reader in-process (graphs, plans, CSVs, snapshots) and the validator (false plans);
* the app's upload paths (graph upload, plan import, snapshot upload);
* a writer killed at random moments (nothing lost);

and counts tracebacks, runs with a wrong exit status or a message on more than one line,
silently accepted false figures, lost files, and the largest peak memory of a refusing run.

Run: ``PYTHONPATH=$PWD python benchmarks/fuzz_bench.py [--workers 2]``.
"""

from __future__ import annotations

import argparse
import base64
import collections
import concurrent.futures as cf
import datetime as dt
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.fuzz.corpus import BASE_GRAPH, FUZZ_ENV, cases, false_plan, write_case  # noqa: E402
from tests.fuzz.runner import MAX_RSS_MIB, Result, matrix, run_cli, verdict  # noqa: E402


def cli(directory: Path, workers: int) -> list[Result]:
    runs = matrix(directory)

    def one(run: Any) -> Result:
        status, err, rss, secs = run_cli(run.argv)
        return Result(run, status, err, rss, secs)

    with cf.ThreadPoolExecutor(workers) as pool:
        return list(pool.map(one, runs))


def readers(directory: Path) -> dict[str, Any]:
    """In-process: every refused case raises its RoamError; every false plan is caught."""
    from roam_core.base.errors import RoamError
    from roam_core.formats.graph_io import load_graph
    from roam_core.oracle.validate import check_plan
    from tests.fuzz.test_readers import read

    os.environ.update(FUZZ_ENV)
    counts: collections.Counter[str] = collections.Counter()
    wrong: list[str] = []
    for case in cases():
        path = write_case(case, directory)
        if case.expect == "false":
            if check_plan(load_graph(BASE_GRAPH), false_plan(case)):
                counts["false figure caught"] += 1
            else:
                wrong.append(f"{case.name}: accepted")
            continue
        try:
            read(case, path)
            counts["read" if case.expect == "accept" else "ACCEPTED"] += 1
            if case.expect != "accept":
                wrong.append(f"{case.name}: accepted")
        except RoamError:
            counts["refused (RoamError)"] += 1
        except Exception as e:  # counted, never expected
            counts["other exception"] += 1
            wrong.append(f"{case.name}: {type(e).__name__}")
    return {"counts": dict(counts), "wrong": wrong}


def uploads() -> dict[str, Any]:
    """The app's upload paths over every bad graph, plan and snapshot."""
    from app.core import state
    from app.views.export.data import import_plan
    from app.views.loading.data import graph_from_upload
    from app.views.snapshot.data import snapshot_from_upload
    from roam_core.base.errors import RoamError
    from roam_core.formats.graph_io import load_graph

    state.configure(tempfile.mkdtemp(prefix="roam-fuzz-cache-"))
    gk = state.put_graph(load_graph(BASE_GRAPH))
    counts: collections.Counter[str] = collections.Counter()
    wrong: list[str] = []
    for case in cases():
        if case.special or case.kind == "csv" or case.expect == "accept":
            continue
        url = "data:;base64," + base64.b64encode(case.data).decode()
        try:
            if case.kind == "graph":
                graph_from_upload(url, case.name, 16 << 20)
            elif case.kind == "plan":
                import_plan(url, case.name, gk, 16 << 20)
            else:
                snapshot_from_upload(url, case.name)
            wrong.append(f"{case.name}: accepted")
        except RoamError:
            counts[f"{case.kind} refused"] += 1
        except Exception as e:
            counts["other exception"] += 1
            wrong.append(f"{case.name}: {type(e).__name__}: {e}")
    return {"counts": dict(counts), "wrong": wrong}


_WRITER = """
import sys
from roam_core.base.atomic import atomic_writer
print("ready", flush=True)
i = 0
while True:
    i += 1
    body = (f"{i:08d}" * 1_000_000).encode()
    with atomic_writer(sys.argv[1]) as f:
        for k in range(0, len(body), 1 << 16):
            f.write(body[k:k + (1 << 16)])
        f.write(b"END")
"""


def kills(directory: Path, n: int) -> dict[str, Any]:
    """A writer killed ``n`` times at random moments: how often the file was lost."""
    target = directory / "killed.bin"
    target.write_bytes(b"old")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    rng = random.Random(0)
    lost = new = 0
    for _ in range(n):
        p = subprocess.Popen([sys.executable, "-c", _WRITER, str(target)], env=env,
                             stdout=subprocess.PIPE)
        assert p.stdout is not None
        p.stdout.readline()
        time.sleep(rng.uniform(0.0, 0.8))
        p.send_signal(signal.SIGKILL)
        p.wait()
        p.stdout.close()
        data = target.read_bytes()
        ok = data == b"old" or (data.endswith(b"END") and len(data) == 8_000_003
                                and data[:-3] == data[:8] * 1_000_000)
        lost += not ok
        new += ok and data != b"old"
    return {"kills": n, "lost": lost, "complete_new_files": new}


def machine() -> dict[str, Any]:
    return {"date": dt.date.today().isoformat(), "nproc": os.cpu_count(),
            "loadavg": [round(x, 2) for x in os.getloadavg()]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=2, help="children at a time")
    ap.add_argument("--kills", type=int, default=30)
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    a = ap.parse_args()
    res: dict[str, Any] = {"machine_before": machine()}
    with tempfile.TemporaryDirectory(prefix="roam-fuzz-") as tmp:
        d = Path(tmp)
        t0 = time.monotonic()
        results = cli(d, a.workers)
        res["cli_seconds"] = round(time.monotonic() - t0)
        res["cli"] = summarise(results)
        rd = d / "readers"
        rd.mkdir()
        res["readers"] = readers(rd)
        res["uploads"] = uploads()
        res["kills"] = kills(d, a.kills)
    res["machine_after"] = machine()
    out = Path(a.out)
    (out / "fuzz.json").write_text(json.dumps(res, indent=1) + "\n")
    (out / "fuzz.md").write_text(markdown(res))
    print(markdown(res))


def summarise(results: list[Result]) -> dict[str, Any]:
    by_cmd: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    problems = []
    for r in results:
        v = verdict(r)
        by_cmd[r.run.argv[0]]["runs"] += 1
        by_cmd[r.run.argv[0]][f"exit {r.status}"] += 1
        if v:
            problems.append({"case": r.run.case, "argv": " ".join(r.run.argv)[:160],
                             "verdict": v, "stderr": r.stderr.strip()[-300:]})
    return {"runs": len(results),
            "tracebacks": sum("Traceback" in r.stderr for r in results),
            "wrong": len(problems), "problems": problems,
            "max_rss_mib": round(max(r.rss_mib for r in results), 1),
            "max_seconds": round(max(r.seconds for r in results), 1),
            "by_command": {k: dict(v) for k, v in sorted(by_cmd.items())}}


def markdown(res: dict[str, Any]) -> str:
    c, rd, up, k = res["cli"], res["readers"], res["uploads"], res["kills"]
    m0, m1 = res["machine_before"], res["machine_after"]
    false_total = sum(1 for x in cases(("plan",)) if x.expect == "false")
    false_ok = rd["counts"].get("false figure caught", 0)
    lines = [
        "# Fuzz: bad input through every command, reader and upload", "",
        f"Measured {m0['date']} on {m0['nproc']} CPUs, load average {m0['loadavg']} before and "
        f"{m1['loadavg']} after (shared machine). Corpus: `tests/fuzz/corpus.py` "
        f"({len(cases())} inputs); written by `benchmarks/fuzz_bench.py`.", "",
        "| goal | count |", "|---|---:|",
        f"| tracebacks (CLI, {c['runs']} runs) | **{c['tracebacks']}** |",
        f"| runs with a wrong exit status or not one error line | **{c['wrong']}** |",
        f"| false figures accepted (of {false_total} false plans; `roam check` exit 1, "
        f"report/execute exit 2) | **{false_total - false_ok}** |",
        f"| lost files (writer killed at random moments, {k['kills']} kills; "
        f"{k['complete_new_files']} left a complete new file) | **{k['lost']}** |",
        f"| largest peak RSS of a CLI run (limit {MAX_RSS_MIB} MiB) | {c['max_rss_mib']} MiB |",
        f"| in-process readers: other exceptions / inputs accepted that should not be | "
        f"{rd['counts'].get('other exception', 0)} / {rd['counts'].get('ACCEPTED', 0)} |",
        f"| app uploads: other exceptions / accepted that should not be | "
        f"{up['counts'].get('other exception', 0)} / {len(up['wrong'])} |", "",
        f"The CLI matrix took {res['cli_seconds']} s ({c['max_seconds']} s the longest run).",
        "", "## CLI runs by command", "", "| command | runs | exit statuses |", "|---|---:|---|"]
    for cmd, counts in c["by_command"].items():
        st = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()) if k != "runs")
        lines.append(f"| {cmd} | {counts['runs']} | {st} |")
    lines += ["", "## Readers (in-process)", ""]
    lines += [f"- {k}: {v}" for k, v in sorted(rd["counts"].items())]
    lines += ["", "## App uploads", ""] + [f"- {k}: {v}" for k, v in sorted(up["counts"].items())]
    wrong = c["problems"] + [{"case": w} for w in rd["wrong"] + up["wrong"]]
    if wrong:
        lines += ["", "## What went wrong", ""]
        lines += [f"- {w.get('case')}: `{w.get('argv', '')}` {w.get('verdict', '')} "
                  f"{w.get('stderr', '')[-150:]}" for w in wrong[:50]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
