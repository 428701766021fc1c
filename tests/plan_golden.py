"""Fingerprints of the plans roam makes on the committed graphs (a refactoring guard).

A refactoring must not change a single plan.  This script plans every sample graph (and, with
``--xl``, the GPT2-XL graphs traced from the zoo) with the default settings, plus a budget plan
on the steady graphs, and writes one line per case: the hashes of the order, the offsets and
the recomputed ops, and the peak, arena and bound in bytes.
``tests/roam_core/planner/test_plan_golden.py`` compares a fresh run with the committed
``tests/data/plan_golden.json``.

    python -m tests.plan_golden --write --xl     # regenerate (only when a change is meant)
    python -m tests.plan_golden --check [--xl]   # compare; exit 1 on a difference
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "data" / "plan_golden.json"

#: Steady graphs that also get budget plans: the frontier's knee (``"auto"``), and 95 % and
#: 85 % of the peak without recomputation (recorded as ``"infeasible"`` when nothing fits).
BUDGET_GRAPHS = ("teach_recompute-b256-steady", "tiny_gpt-b2-t32-steady", "mlp-b8-steady",
                 "residual_block-b4-steady", "gpt2-b1-t128-steady", "resnet50-b8-steady",
                 "mobilenet_v2-b8-steady")


def _sha(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def fingerprint(plan: object) -> dict[str, object]:
    """The parts of a plan a refactoring must keep byte-identical."""
    return {
        "order": _sha(list(plan.order)),  # type: ignore[attr-defined]
        "offsets": _sha(sorted(plan.offsets.items())),  # type: ignore[attr-defined]
        "recompute": _sha([r.id for r in plan.recompute]),  # type: ignore[attr-defined]
        "extra_flops": plan.extra_flops,  # type: ignore[attr-defined]
        "planned_peak_bytes": plan.planned_peak_bytes,  # type: ignore[attr-defined]
        "arena_bytes": plan.arena_bytes,  # type: ignore[attr-defined]
        "lower_bound_bytes": plan.lower_bound_bytes,  # type: ignore[attr-defined]
    }


def _graphs(xl: bool) -> Iterator[tuple[str, object]]:
    from roam_core.formats.graph_io import load_graph

    for path in sorted((ROOT / "sample_graphs").glob("*.json.gz")):
        yield path.name.removesuffix(".json.gz"), load_graph(path)
    if xl:
        from roam_core.zoo import trace_zoo

        yield "gpt2-xl-b1-t128-steady", trace_zoo("gpt2-xl", 1, seq_len=128).graph
        yield "gpt2-xl-b1-roam", trace_zoo("gpt2-xl", 1, setting="roam").graph


def compute(xl: bool = False, only: str | None = None) -> dict[str, dict[str, object]]:
    """Plan every case and return ``{case: fingerprint}``."""
    from roam_core.base.errors import BudgetInfeasibleError
    from roam_core.planner import make_plan
    from roam_core.planner.config import PlannerConfig

    cfg = PlannerConfig(workers=1)
    out: dict[str, dict[str, object]] = {}
    for name, graph in _graphs(xl):
        if only and only not in name:
            continue
        plan = make_plan(graph, cfg)  # type: ignore[arg-type]
        out[name] = fingerprint(plan)
        if name in BUDGET_GRAPHS:
            for label, budget in (("auto", "auto"), ("95%", plan.planned_peak_bytes * 95 // 100),
                                  ("85%", plan.planned_peak_bytes * 85 // 100)):
                try:
                    bplan = make_plan(graph, PlannerConfig(workers=1, budget_bytes=budget))  # type: ignore[arg-type]
                except BudgetInfeasibleError:
                    out[f"{name}@{label}"] = {"infeasible": True}
                else:
                    out[f"{name}@{label}"] = fingerprint(bplan)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite the golden file")
    ap.add_argument("--check", action="store_true", help="compare with the golden file")
    ap.add_argument("--xl", action="store_true", help="include the GPT2-XL graphs (slow)")
    ap.add_argument("--only", help="cases whose name contains this")
    args = ap.parse_args(argv)
    got = compute(args.xl, args.only)
    if args.write:
        old = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
        old.update(got)
        GOLDEN.write_text(json.dumps(old, indent=1, sort_keys=True) + "\n")
        return 0
    want = json.loads(GOLDEN.read_text())
    bad = [k for k in got if want.get(k) != got[k]]
    for k in bad:
        sys.stdout.write(f"DIFFERENT {k}: {want.get(k)} != {got[k]}\n")
    sys.stdout.write(f"{len(got) - len(bad)}/{len(got)} identical\n")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
