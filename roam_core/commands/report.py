"""``roam report GRAPH PLAN -o REPORT.html``: the app's offline HTML report, from the CLI.

The figures live in the app (``app.report``), which roam_core never imports at module level:
the handler loads it lazily, as ``roam serve`` does (an ``ignore_imports`` entry of the
architecture contract names this one door).
"""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``report`` sub-command."""
    p = subparsers.add_parser(
        "report", help="write the offline HTML report of a plan",
        description="Write one self-contained HTML page (plotly.js inlined, works offline) "
                    "with the summary, the memory curves, the operator timeline, both arena "
                    "layouts, the task tree and the tensors live at the peak: the same report "
                    "as the app's \"HTML report\" button.  The plan is checked against the "
                    "graph first.")
    p.add_argument("graph", help="graph file (.json or .json.gz)")
    p.add_argument("plan", help="plan file (.json or .json.gz) made for that graph")
    p.add_argument("-o", "--output", required=True, metavar="REPORT.html",
                   help="where to write the report")
    p.add_argument("--baseline", default="eager", metavar="M",
                   help="the 'before' order to compare with (default eager; also inductor, "
                        "lescea, xla, eager_moved_state)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from app.report import build_report  # the app is loaded only by this command (lazily)
    from roam_core.base.atomic import atomic_write, check_output_path
    from roam_core.formats.graph_io import load_graph
    from roam_core.formats.plan_io import load_plan

    check_output_path(args.output, "-o/--output")
    graph = load_graph(args.graph)
    plan = load_plan(args.plan)
    # a recompute plan is drawn on its expanded graph by the app's views themselves
    text = build_report(graph, plan, args.baseline)
    out = Path(args.output)
    atomic_write(out, text.encode("utf-8"), what="report")
    print(f"wrote {out} ({len(text) / 2**20:.1f} MiB): {plan.method} plan for {graph.name}")
    return 0
