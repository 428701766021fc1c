"""``roam bench``: run ordering methods over a suite of graphs; write a CSV and a markdown table.

Suites
------
* ``roam``: the ROAM paper's 14 (model, batch size) configurations in the chosen setting:
  the committed sample graph when there is one (``sample_graphs/*.json.gz``, matched by its
  ``origin`` record, not by file name), else traced on demand.
* ``quick``: the hand-built teaching graphs (``roam_core.model.samples``) plus two small zoo models
  (``mlp`` and ``tiny_gpt``): a committed graph of the setting when there is one, else traced
  on demand at batch 2.
* ``gpt2xl``: GPT2-XL at batch 1, 2 and 4, traced on demand (about 10 s and a few GiB of RAM
  each).

``--graphs FILE ...`` benchmarks given graph files instead.  Progress goes to stderr; results
go to ``<out>/ordering_<suite>_<setting>.csv`` and ``.md`` (rewritten after every graph).
Module-level imports stay light: torch and the zoo are imported inside the handler.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from roam_core.base.executors import EXECUTOR_HELP

if TYPE_CHECKING:  # the harness loads the planner (OR-Tools): only when the command runs
    from roam_core.bench.harness import BenchCase, BenchRow
    from roam_core.model.graph import Graph

__all__ = ["register"]

_QUICK_MODELS = (("mlp", 2), ("tiny_gpt", 2))
_GPT2XL_BATCHES = (1, 2, 4)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``bench`` sub-command."""
    p = subparsers.add_parser(
        "bench", help="benchmark ordering methods (baselines, monolithic ILP, ROAM) on a suite",
        description="Run graphs x methods and write a CSV (peak, arena, seconds, eager "
                    "allocated/reserved, lower bound, cuts) and a markdown table.")
    p.add_argument("--suite", choices=("roam", "quick", "gpt2xl"), default="quick",
                   help="which graphs (default quick)")
    p.add_argument("--setting", choices=("roam", "steady"), default="roam",
                   help="graph setting (default roam: the paper's first Adam step)")
    p.add_argument("--methods", default=None,
                   help="comma-separated methods (default: every baseline, lescea+llfb, "
                        "best_heuristic, monolithic, roam); NAME+llfb / NAME+greedy fixes a "
                        "baseline's layout")
    p.add_argument("--time-limit", type=float, default=None, metavar="S",
                   help="solver budget per graph for monolithic and roam, seconds")
    p.add_argument("--monolithic-max-ops", type=int, default=400,
                   help="skip the monolithic ILP above this many ops (default 400)")
    p.add_argument("--layout", choices=("best", "greedy", "llfb", "none"), default="best",
                   help="layout of plain (baseline) orders: greedy by size, ROAM's LLFB, the "
                        "better of the two (default), or none (arena only from plans)")
    p.add_argument("--graphs", nargs="+", default=None, metavar="FILE",
                   help="benchmark these graph files instead of a suite")
    p.add_argument("--samples", default="sample_graphs",
                   help="folder of committed graphs (default sample_graphs)")
    p.add_argument("--limit", type=int, default=None,
                   help="at most this many graphs of the suite")
    p.add_argument("--out", default=os.path.join("benchmarks", "results"),
                   help="output folder (default benchmarks/results)")
    p.add_argument("--executor", default="local", metavar="SPEC",
                   help=EXECUTOR_HELP + "; used by the roam rows' sub-task solves")
    p.add_argument("--name", default=None,
                   help="file stem (default ordering_<suite>_<setting>)")
    p.set_defaults(func=_run)


def _progress(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


def _trace_case(model: str, batch_size: int, setting: str) -> BenchCase:
    from roam_core.bench import BenchCase

    def load() -> Graph:
        from roam_core.zoo import trace_zoo

        _progress(f"tracing {model} batch {batch_size} ({setting}) ...")
        return trace_zoo(model, batch_size, setting=setting).graph

    return BenchCase(f"{model}_b{batch_size}_{setting}", load)


def _cases(args: argparse.Namespace) -> list[BenchCase]:
    from roam_core.bench import BenchCase, sample_graph_cases
    from roam_core.formats.graph_io import load_graph

    if args.graphs:
        return [BenchCase(os.path.basename(p).split(".json")[0], functools.partial(load_graph, p))
                for p in args.graphs]
    if args.suite == "roam":
        from roam_core.zoo import ROAM_CONFIGS

        cases: list[BenchCase] = []
        for model, bs in ROAM_CONFIGS:
            found = sample_graph_cases(args.samples, setting=args.setting,
                                       configs=[(model, bs)])
            cases += found[:1] or [_trace_case(model, bs, args.setting)]
    elif args.suite == "quick":
        from roam_core.model.samples import SAMPLES

        cases = [BenchCase(name, f) for name, f in SAMPLES.items()]
        for model, bs in _QUICK_MODELS:
            found = sample_graph_cases(args.samples, setting=args.setting, models=[model])
            cases += found[:1] or [_trace_case(model, bs, args.setting)]
    else:
        cases = [_trace_case("gpt2-xl", bs, args.setting) for bs in _GPT2XL_BATCHES]
    return cases[: args.limit] if args.limit else cases


def _run(args: argparse.Namespace) -> int:
    from roam_core.base.errors import ConfigError
    from roam_core.base.executors import open_executor, parse_executor
    from roam_core.bench import DEFAULT_BENCH_METHODS, run_bench, write_csv, write_markdown
    from roam_core.ordering.registry import ORDER_METHODS

    methods = (tuple(m.strip() for m in args.methods.split(",") if m.strip())
               if args.methods else DEFAULT_BENCH_METHODS)
    extra = {"best_heuristic", "monolithic", "roam"}
    unknown = [m for m in methods if m not in extra and not (
        m.partition("+")[0] in ORDER_METHODS and m.partition("+")[2] in ("", "greedy", "llfb"))]
    if unknown:
        raise ConfigError(f"unknown method(s) {', '.join(unknown)}; known: "
                          f"{', '.join([*ORDER_METHODS, *sorted(extra)])}")
    spec = parse_executor(args.executor)
    cases = _cases(args)
    stem = args.name or (f"ordering_{'files' if args.graphs else args.suite}_{args.setting}")
    csv_path = os.path.join(args.out, stem + ".csv")
    md_path = os.path.join(args.out, stem + ".md")
    title = f"Ordering benchmark: suite {args.suite}, setting {args.setting}"

    def save(rows: Sequence[BenchRow]) -> None:
        write_csv(rows, csv_path)
        write_markdown(rows, md_path, title)

    _progress(f"{len(cases)} graph(s) x {len(methods)} method(s) -> {csv_path}")
    with open_executor(spec) as executor:
        rows = run_bench(cases, methods, time_limit_s=args.time_limit,
                         monolithic_max_ops=args.monolithic_max_ops, layout=args.layout,
                         progress=_progress, on_rows=save, executor=executor)
    save(rows)
    failed = sum(r.status == "failed" for r in rows)
    print(f"{len(rows)} rows ({failed} failed) -> {csv_path}, {md_path}")
    return 1 if failed and failed == len(rows) else 0
