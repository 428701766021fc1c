"""llama-1b bf16-mixed t2048 around "roam <= 5 % fits >= 2x eager": where the bytes are, roam
against its peers, and roam with autocast's repeated casts made once.

Usage::

    nice python benchmarks/fit_gap_bench.py [--config docs/examples/hf/llama-1b.json]
        [--seq-len 2048] [--memory 80GiB] [--batch-sizes 16 20 24]
        [--out benchmarks/results/fit_gap]

For each batch, on the same traced graph (steady AdamW step, bf16-mixed, SDPA as torch picks
it on CPU) and the same cost model (the planner's device profile):

* the byte breakdown: resident storages (fp32 weights, AdamW state) by kind, forward storages
  the backward reads (activations) by dtype, and the gradients;
* the bytes live at the peak of roam's plans by class (resident weights and AdamW state, the
  vocab-wide fp32 loss tensors, matmul / attention outputs, fp32 islands, activation casts,
  bf16 weight copies, bf16 elementwise outputs), the droppable ones, their re-run seconds
  per GiB, and what the cheapest-first fill of the 5 % time takes of each;
* roam's cheapest plan that fits the memory (``BudgetPlanner.plan_at``, as ``roam fit``): its
  arena, extra time, and what it recomputes (by producing op, bytes and estimated seconds);
* the peers, each planned with the same order and layout stages
  (``BudgetPlanner.plan_for_drops``): ``checkpoint_blocks`` (``torch.utils.checkpoint``
  around every decoder layer) and ``selective_attention`` (Korthikanti 2022), and the traced
  peer ``torch_sac_save_matmuls`` (:mod:`roam_core.zoo.traced_peers`: every layer in
  ``torch.utils.checkpoint`` with the ``create_selective_checkpoint_contexts`` policy that
  saves matmul and attention outputs and recomputes everything else -- the "save matmuls"
  policy of torch's documentation -- run in the model and traced by roam,
  ``BudgetPlanner.plan_other``);
* the lowest just-in-time peak roam's greedy reaches within 5 % extra time.

The file records the date, ``os.getloadavg()`` and ``nproc``; byte figures do not depend on
the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's roam_core

GIB = 2**30
#: byte classes at the peak, in report order
CLASSES = ("resident: fp32 weights", "resident: AdamW state", "loss: vocab-wide fp32",
           "gradients", "matmul / attention outputs", "fp32 islands (residual, RMSNorm)",
           "activation casts to bf16", "bf16 weight copies", "bf16 elementwise (SiLU, gate)",
           "other")
MATMULS = ("aten.mm", "aten.addmm", "aten.bmm", "aten._scaled_dot_product",
           "aten.scaled_dot_product")


def byte_class(graph: Any, tid: Any, vocab: int, copies: set[Any]) -> str:
    """Which of :data:`CLASSES` a storage belongs to."""
    from roam_core.model.graph import Phase, TensorKind

    t = graph.tensors[tid]
    if t.producer is None:
        return ("resident: fp32 weights" if t.kind is TensorKind.PARAMETER else
                "resident: AdamW state" if t.kind is TensorKind.OPTIMIZER_STATE else "other")
    if t.shape and t.shape[-1] == vocab and str(t.dtype) == "float32":
        return "loss: vocab-wide fp32"
    if t.kind is TensorKind.GRADIENT:
        return "gradients"
    op = graph.op(t.producer)
    if tid in copies:
        return "bf16 weight copies"
    if op.phase is not Phase.FORWARD:
        return "other"
    if op.target.startswith(MATMULS):
        return "matmul / attention outputs"
    if "_to_copy" in op.target:
        return "activation casts to bf16"
    return ("fp32 islands (residual, RMSNorm)" if str(t.dtype) == "float32"
            else "bf16 elementwise (SiLU, gate)")


def peak_classes(graph: Any, bp: Any, plan: Any, limit_pct: float) -> dict[str, Any]:
    """The bytes live at ``plan``'s peak by :data:`CLASSES`, the droppable ones among them
    and their re-run seconds (each storage priced at its own op's seconds, shared by bytes
    among the op's outputs), and the fractional knapsack of the droppable bytes within
    ``limit_pct`` extra time, cheapest per byte first (how many GiB of each class it takes)."""
    from roam_core.model.recompute_ops import droppable_storages, expand_graph
    from roam_core.oracle.precision_bytes import weight_copies
    from roam_core.oracle.simulate import lifetimes

    g = expand_graph(graph, plan.recompute, plan.order) if plan.recompute else graph
    vocab = int(((graph.origin or {}).get("hf_config") or {}).get("vocab_size") or 0)
    copies = weight_copies(graph)
    ok = set(droppable_storages(graph))
    step = max(range(len(plan.live_bytes)), key=plan.live_bytes.__getitem__)
    live = {tid for tid, lt in lifetimes(g, plan.order).items() if lt.start <= step <= lt.end}
    live |= {t.id for t in g.tensors.values() if t.producer is None}
    out_bytes: dict[Any, int] = {}
    for s in ok:
        p = graph.tensors[s].producer
        out_bytes[p] = out_bytes.get(p, 0) + graph.tensors[s].size_bytes
    rows = {c: {"live_bytes": 0, "droppable_bytes": 0, "rerun_seconds": 0.0,
                "knapsack_bytes": 0.0} for c in CLASSES}
    items = []
    for tid in live:
        t = g.tensors[tid]
        c = byte_class(g if tid not in graph.tensors else graph, tid, vocab, copies)
        rows[c]["live_bytes"] += t.size_bytes
        if tid in ok and t.size_bytes:
            secs = bp.costs.seconds[t.producer] * t.size_bytes / out_bytes[t.producer]
            rows[c]["droppable_bytes"] += t.size_bytes
            rows[c]["rerun_seconds"] += secs
            items.append((secs / t.size_bytes, t.size_bytes, c))
    left = limit_pct / 100.0 * bp.step_seconds
    for per_byte, b, c in sorted(items):
        take = b if per_byte * b <= left else left / per_byte
        rows[c]["knapsack_bytes"] += take
        left -= per_byte * take
        if left <= 0:
            break
    op = g.op(plan.order[step])
    return {"step": step, "op": op.target, "module": op.module, "classes": rows}


def breakdown(graph: Any) -> dict[str, Any]:
    """Bytes by kind (resident ones apart) and the saved activations by dtype."""
    from roam_core.model.graph import Phase, TensorKind

    resident: Counter[str] = Counter()
    made: Counter[str] = Counter()
    saved: Counter[str] = Counter()
    for t in graph.tensors.values():
        if t.producer is None:
            resident[str(t.kind)] += t.size_bytes
            continue
        made[str(t.kind)] += t.size_bytes
        op = graph.op(t.producer)
        if t.kind == TensorKind.ACTIVATION and op.phase is Phase.FORWARD:
            saved[str(t.dtype)] += t.size_bytes
    return {"resident_bytes_by_kind": dict(resident), "made_bytes_by_kind": dict(made),
            "saved_activation_bytes_by_dtype": dict(saved)}


def what_recomputed(graph: Any, bp: Any, plan: Any) -> list[dict[str, Any]]:
    """The plan's re-run ops grouped by ATen target: count, bytes they remake, seconds."""
    by: dict[str, list[float]] = {}
    for r in plan.recompute:
        op_id = r.source
        op = graph.op(op_id)
        made = sum(graph.tensors[s].size_bytes for s in graph.storages_created(op_id))
        row = by.setdefault(op.target, [0, 0.0, 0.0])
        row[0] += 1
        row[1] += made
        row[2] += bp.costs.seconds[op_id]
    rows = [{"target": k, "ops": int(v[0]), "bytes": int(v[1]), "seconds": v[2]}
            for k, v in by.items()]
    return sorted(rows, key=lambda r: -r["seconds"])


def drop_bound_bytes(graph: Any, bp: Any, limit_pct: float) -> int:
    """The most bytes any drop set can remove within ``limit_pct`` extra time: every
    droppable storage priced at its producer's own re-run seconds alone (a lower bound on
    its cost: re-running a chain costs more), filled cheapest seconds-per-byte first (a
    fractional knapsack, an upper bound on the bytes).  A drop lowers the peak by at most
    its size, so a batch whose arena must fall by more cannot fit within the limit under
    any recomputation policy (on this cost model and roam's rules of what may be re-run)."""
    from roam_core.model.recompute_ops import droppable_storages

    by_op: dict[Any, int] = {}
    for s in droppable_storages(graph):
        p = graph.tensors[s].producer
        by_op[p] = by_op.get(p, 0) + graph.tensors[s].size_bytes
    items = sorted(((bp.costs.seconds[p] / b, b) for p, b in by_op.items() if b),
                   key=lambda x: x[0])
    left, got = limit_pct / 100.0 * bp.step_seconds, 0.0
    for per_byte, b in items:
        if per_byte * b <= left:
            left -= per_byte * b
            got += b
        else:
            got += left / per_byte if per_byte > 0 else b
            break
    return int(got)


def pct(extra_s: float, step_s: float) -> float:
    return 100.0 * extra_s / max(step_s, 1e-12)


def measure(config: str, batch: int, seq: int, memory: int) -> dict[str, Any]:
    from roam_core.base.errors import BudgetInfeasibleError
    from roam_core.planner.budget import BudgetPlanner
    from roam_core.planner.config import PlannerConfig
    from roam_core.recompute.baselines import baseline_drop_set
    from roam_core.zoo.sources import ModelSource
    from roam_core.zoo.traced_peers import SAVE_MATMULS, save_matmuls_peer

    t0 = time.perf_counter()
    g = ModelSource(hf_config=config).trace(batch, seq, precision="bf16-mixed").graph
    bp = BudgetPlanner(g, PlannerConfig(workers=1))
    row: dict[str, Any] = {"batch_size": batch, "ops": len(g.ops), **breakdown(g),
                           "step_seconds": bp.step_seconds, "roam_bytes": bp.base.arena_bytes,
                           "resident_bytes": g.resident_bytes()}
    points = bp.trajectory[2]
    within5 = [p.peak_bytes for p in points if pct(p.extra_seconds, bp.step_seconds) <= 5]
    row["greedy_lowest_within_5pct_bytes"] = int(min(within5, default=bp.base.arena_bytes))
    row["greedy_lowest_bytes"] = int(min(p.peak_bytes for p in points))
    row["drop_bound_5pct_bytes"] = drop_bound_bytes(g, bp, 5.0)
    # any order's peak without recomputation is at least the live-set lower bound, and a
    # drop set lowers a peak by at most its bytes
    row["lower_bound_bytes"] = bp.base.lower_bound_bytes
    row["needed_drop_bytes"] = max(0, bp.base.lower_bound_bytes - memory)
    row["peak_classes"] = {"roam, no recomputation": peak_classes(g, bp, bp.base, 5.0)}
    try:
        plan = bp.plan_at(memory)
        row["roam_at_memory"] = {
            "arena_bytes": plan.arena_bytes, "extra_pct": pct(plan.extra_seconds,
                                                              bp.step_seconds),
            "method": plan.method, "recompute_ops": len(plan.recompute),
            "by_target": what_recomputed(g, bp, plan)[:12]}
        row["peak_classes"]["roam at the cap"] = peak_classes(g, bp, plan, 5.0)
    except BudgetInfeasibleError as e:
        row["roam_at_memory"] = {"error": str(e)}
    peers = {n: baseline_drop_set(g, n) for n in ("checkpoint_blocks", "selective_attention")}
    row["peers"] = {}
    # torch's "save matmuls" selective policy runs in the model: traced as its own graph
    other = save_matmuls_peer(g)
    p = bp.plan_other(other)
    row["peers"][SAVE_MATMULS] = {
        "arena_bytes": p.arena_bytes, "extra_pct": pct(p.step_seconds - bp.step_seconds,
                                                       bp.step_seconds),
        "extra_ops": len(other.ops) - len(g.ops)}
    for name, drops in peers.items():
        if not drops:
            row["peers"][name] = {"applies": False}
            continue
        p = bp.plan_for_drops(drops, name)
        row["peers"][name] = {
            "arena_bytes": p.arena_bytes, "extra_pct": pct(p.extra_seconds, bp.step_seconds),
            "dropped_bytes": sum(g.tensors[s].size_bytes for s in drops),
            "recompute_ops": len(p.recompute), "by_target": what_recomputed(g, bp, p)[:8]}
    row["merged_casts"] = measure_merged(config, batch, seq, memory, bp.step_seconds)
    row["seconds"] = time.perf_counter() - t0
    return row


def measure_merged(config: str, batch: int, seq: int, memory: int,
                   eager_step_s: float) -> dict[str, Any]:
    """roam on the same step with autocast's repeated casts made once
    (``merge_casts``, :mod:`roam_core.trace.identical_casts`): its live-set bound, its
    cheapest plan at the cap, and that plan's time against the eager step's (the unmerged
    step's seconds: eager makes every cast)."""
    from roam_core.base.errors import BudgetInfeasibleError
    from roam_core.planner.budget import BudgetPlanner
    from roam_core.planner.config import PlannerConfig
    from roam_core.zoo.sources import ModelSource

    g = ModelSource(hf_config=config).trace(batch, seq, precision="bf16-mixed",
                                            merge_casts=True).graph
    bp = BudgetPlanner(g, PlannerConfig(workers=1))
    out: dict[str, Any] = {"merged_casts": g.origin.get("merged_casts", 0),
                           "ops": len(g.ops), "roam_bytes": bp.base.arena_bytes,
                           "lower_bound_bytes": bp.base.lower_bound_bytes,
                           "step_seconds": bp.step_seconds,
                           "drop_bound_5pct_bytes": drop_bound_bytes(g, bp, 5.0),
                           "needed_drop_bytes": max(0, bp.base.lower_bound_bytes - memory)}
    try:
        plan = bp.plan_at(memory)
        out["roam_at_memory"] = {
            "arena_bytes": plan.arena_bytes, "method": plan.method,
            "recompute_ops": len(plan.recompute),
            "extra_pct": pct(bp.step_seconds + plan.extra_seconds - eager_step_s,
                             eager_step_s)}
        out["peak_classes"] = peak_classes(g, bp, plan, 5.0)
    except BudgetInfeasibleError as e:
        out["roam_at_memory"] = {"error": str(e)}
    return out


def write(res: dict[str, Any], out: Path) -> None:
    out.with_suffix(".json").write_text(json.dumps(res, indent=1) + "\n")
    gib = lambda b: f"{b / GIB:.2f}"  # noqa: E731
    lines = [f"# llama-1b bf16-mixed t{res['seq_len']} around 2x eager's batch within 5 %: "
             "bytes at the peak, roam, its peers, merged casts",
             "", f"Produced by `benchmarks/fit_gap_bench.py` on {res['date']} (UTC); machine: "
             f"{res['nproc']} cores, load average {res['load_start']} at the start and "
             f"{res.get('load_end')} at the end (shared machine; byte figures and cost-model "
             "seconds do not depend on load).", "",
             f"Memory {gib(res['memory_bytes'])} GiB. Extra time: re-run seconds as a share "
             "of the step's on the planner's device profile (docs/cost_model.md).", ""]
    lines += ["| batch | roam <= 5 % fits | peers that fit within 5 % | needed drop GiB | "
              "drop bound within 5 % GiB |", "|---:|---|---|---:|---:|"]
    for r in res["rows"]:
        m = r["roam_at_memory"]
        ok = "arena_bytes" in m and m["extra_pct"] <= 5.0
        peers = [n for n, p in r["peers"].items() if p.get("applies", True)
                 and p["arena_bytes"] <= res["memory_bytes"] and p["extra_pct"] <= 5.0]
        lines.append(f"| {r['batch_size']} | {'yes' if ok else 'no'} "
                     f"({m.get('extra_pct', float('nan')):+.2f}%) | {', '.join(peers) or 'none'}"
                     f" | {gib(r['needed_drop_bytes'])} | {gib(r['drop_bound_5pct_bytes'])} |")
    lines += ["", "A peer that fits a batch within 5 % where roam does not would be a planner "
              "defect. `selective_attention` does not apply: the graph has no T x T softmax "
              "output (SDPA's fused kernel saves its output and a logsumexp). "
              "`torch_sac_save_matmuls` is the model with every decoder layer in "
              "`torch.utils.checkpoint` under the \"save matmuls\" selective policy "
              "(`create_selective_checkpoint_contexts`, `roam_core.zoo.traced_peers`), traced "
              "by roam as its own graph and planned by the same stages; its extra time is its "
              "step's less this one's on the same cost model.", ""]
    lines += merged_lines(res)
    for r in res["rows"]:
        kinds = ", ".join(f"{k} {gib(v)}" for k, v in r["resident_bytes_by_kind"].items())
        lines += [f"## batch {r['batch_size']}", "",
                  f"resident (fp32 weights + AdamW state + inputs): {gib(r['resident_bytes'])} "
                  f"GiB ({kinds}); step {1e3 * r['step_seconds']:.0f} ms on the cost model; "
                  "forward activations by dtype: "
                  + ", ".join(f"{k} {gib(v)} GiB"
                              for k, v in r['saved_activation_bytes_by_dtype'].items()),
                  "", "| method | arena GiB | extra time | fits |", "|---|---:|---:|---|",
                  f"| roam, no recomputation | {gib(r['roam_bytes'])} | 0 | "
                  f"{'yes' if r['roam_bytes'] <= res['memory_bytes'] else 'no'} |"]
        m = r["roam_at_memory"]
        if "arena_bytes" in m:
            lines.append(f"| roam cheapest plan at the cap ({m['method']}) | "
                         f"{gib(m['arena_bytes'])} | +{m['extra_pct']:.2f}% | yes |")
        for name, p in r["peers"].items():
            if p.get("applies", True):
                fits = "yes" if p["arena_bytes"] <= res["memory_bytes"] else "no"
                lines.append(f"| {name} | {gib(p['arena_bytes'])} | +{p['extra_pct']:.2f}% "
                             f"| {fits} |")
        lines += ["", f"roam's greedy, lowest just-in-time peak within 5 %: "
                  f"{gib(r['greedy_lowest_within_5pct_bytes'])} GiB (lowest at any cost "
                  f"{gib(r['greedy_lowest_bytes'])} GiB).", "",
                  f"Any order's peak without recomputation is at least the live-set lower bound "
                  f"{gib(r['lower_bound_bytes'])} GiB, so to fit, drops must remove at least "
                  f"{gib(r['needed_drop_bytes'])} GiB; the most "
                  "bytes any drop set can remove within 5 % (every droppable storage at its "
                  "own op's re-run seconds, cheapest per byte first: an upper bound) is "
                  f"{gib(r['drop_bound_5pct_bytes'])} GiB"
                  + (" -- **no recomputation policy fits this batch within 5 %**."
                     if r['drop_bound_5pct_bytes'] < r['needed_drop_bytes'] else "."), ""]
        lines += class_lines(r)
        if "by_target" in m:
            lines += ["roam's plan at the cap re-runs (top ops by estimated seconds):", "",
                      "| ATen op | ops | bytes remade GiB | est. ms |", "|---|---:|---:|---:|"]
            lines += [f"| {x['target']} | {x['ops']} | {gib(x['bytes'])} | "
                      f"{1e3 * x['seconds']:.2f} |" for x in m["by_target"]]
            lines.append("")
    lines += res.get("notes", [])
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def merged_lines(res: dict[str, Any]) -> list[str]:
    """The summary of roam with autocast's repeated casts made once."""
    gib = lambda b: f"{b / GIB:.2f}"  # noqa: E731
    rows = [r for r in res["rows"] if "merged_casts" in r]
    if not rows:
        return []
    lines = ["## With autocast's repeated casts made once (`merge_casts`)", "",
             "Under autocast each projection casts its fp32 input to bf16 itself, and each "
             "matmul saves its own copy for the weight gradient: a Llama layer makes three "
             "bit-identical casts of its first RMSNorm's output (q, k, v) and two of its second "
             "(gate, up). `merge_casts` (`roam_core.trace.identical_casts`) makes each once; "
             "the values are bit-identical, so the step is eager's exactly (replayed "
             "bit-exactly in `tests/roam_core/trace/test_identical_casts.py`). Eager PyTorch "
             "makes every copy, so the eager baseline stays the unmerged trace, and the extra "
             "time below is roam's step (merged step + re-runs) against the unmerged eager "
             "step on the same cost model.", "",
             "| batch | casts merged | live-set bound GiB (unmerged -> merged) | needed drop GiB "
             "| drop bound within 5 % GiB | roam at the cap GiB | extra time vs eager | fits "
             "within 5 % |", "|---:|---:|---|---:|---:|---:|---:|---|"]
    for r in rows:
        m = r["merged_casts"]
        cap = m["roam_at_memory"]
        ok = "arena_bytes" in cap and cap["extra_pct"] <= 5.0
        lines.append(
            f"| {r['batch_size']} | {m['merged_casts']} | {gib(r['lower_bound_bytes'])} -> "
            f"{gib(m['lower_bound_bytes'])} | {gib(m['needed_drop_bytes'])} | "
            f"{gib(m['drop_bound_5pct_bytes'])} | "
            f"{gib(cap['arena_bytes']) if 'arena_bytes' in cap else 'none'} | "
            f"{cap.get('extra_pct', float('nan')):+.2f}% | {'yes' if ok else 'no'} |")
    return [*lines, ""]


def class_lines(r: dict[str, Any]) -> list[str]:
    """The byte classes at the peak of roam's plans (see :func:`peak_classes`)."""
    gib = lambda b: f"{b / GIB:.2f}"  # noqa: E731
    pcs = r.get("peak_classes", {})
    if not pcs:
        return []
    base = pcs["roam, no recomputation"]
    cap = pcs.get("roam at the cap")
    lines = [f"Bytes live at the peak of roam's plan without recomputation (op `{base['op']}`)"
             + (f" and of its plan at the cap (op `{cap['op']}`)" if cap else "")
             + ", by class; droppable: what roam may drop and re-run; ms per GiB: the "
             "droppable bytes' re-run seconds on the cost model per GiB; 5 % knapsack: how "
             "many GiB of the class the cheapest-first fill of the 5 % time takes (at this "
             "peak):", "",
             "| class | at peak GiB | droppable GiB | re-run ms per GiB | 5 % knapsack GiB |"
             + (" kept at the cap's peak GiB |" if cap else ""),
             "|---|---:|---:|---:|---:|" + ("---:|" if cap else "")]
    for c in CLASSES:
        x = base["classes"][c]
        if not x["live_bytes"] and not (cap and cap["classes"][c]["live_bytes"]):
            continue
        per = (f"{1e3 * x['rerun_seconds'] / (x['droppable_bytes'] / GIB):.2f}"
               if x["droppable_bytes"] else "—")
        lines.append(f"| {c} | {gib(x['live_bytes'])} | {gib(x['droppable_bytes'])} | {per} "
                     f"| {gib(x['knapsack_bytes'])} |"
                     + (f" {gib(cap['classes'][c]['live_bytes'])} |" if cap else ""))
    return [*lines, ""]


def main() -> None:
    from roam_core.commands.arg_types import size_bytes

    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="docs/examples/hf/llama-1b.json")
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--memory", type=size_bytes, default=80 * GIB)
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[16, 20, 24])
    ap.add_argument("--out", default="benchmarks/results/fit_gap")
    ap.add_argument("--render", action="store_true",
                    help="only rewrite the .md from the .json (with its notes)")
    args = ap.parse_args()
    if args.render:
        write(json.loads(Path(args.out).with_suffix(".json").read_text()), Path(args.out))
        return
    out = Path(args.out)
    res: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                           "load_start": [round(x, 2) for x in os.getloadavg()],
                           "nproc": os.cpu_count(), "config": args.config,
                           "seq_len": args.seq_len, "memory_bytes": args.memory, "rows": []}
    for b in args.batch_sizes:
        res["rows"].append(measure(args.config, b, args.seq_len, args.memory))
        res["load_end"] = [round(x, 2) for x in os.getloadavg()]
        write(res, out)
        print(json.dumps({k: v for k, v in res["rows"][-1].items() if k != "peers"}),
              flush=True)


if __name__ == "__main__":
    main()
