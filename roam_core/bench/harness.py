"""Benchmark harness: graphs x ordering methods -> one CSV and one markdown table.

For every graph the baseline figures are computed once: the eager (program-order) peak as
the live-bytes oracle sees it, as the caching-allocator model sees it (``allocated`` and
``reserved``), the moved-state order's peak (the paper's PyTorch baseline) and the lower
bound on any order's peak.  Then every method runs:

* a cheap order from :data:`roam_core.ordering.registry.ORDER_METHODS` (timed alone; the
  composites ``inductor`` and ``xla`` are the best of their member rows when those ran);
  ``name+greedy`` / ``name+llfb`` fix that row's layout (``lescea+llfb`` is the ROAM paper's
  heuristic baseline, LESCEA order + long-lived-first layout);
* ``best_heuristic``: the best cheap order
  (:func:`~roam_core.ordering.registry.best_heuristic_order`);
* ``monolithic``: MODeL-style CP-SAT over the whole graph (:mod:`roam_core.ordering.monolithic`),
  only for graphs of at most ``monolithic_max_ops`` ops;
* ``roam`` (and any name the planner accepts): :func:`roam_core.planner.make_plan`.

``memory`` of a row is ``arena_bytes`` when the method produced a layout, else the simulated
peak; the cuts compare it with the eager figures (``1 - memory / eager``).  All byte figures
include the resident bytes (parameters, buffers, inputs).
"""

from __future__ import annotations

import concurrent.futures as cf
import csv
import functools
import glob
import gzip
import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass

from roam_core.base.errors import RoamError
from roam_core.base.status import SolveStatus
from roam_core.layout.arena_layout import greedy_arena
from roam_core.layout.baseline_layouts import baseline_layout
from roam_core.model.graph import DEFAULT_ALIGNMENT_BYTES, Graph, Order
from roam_core.oracle.allocator_sim import simulate_allocator
from roam_core.oracle.bounds import best_lower_bound, live_set_lower_bound
from roam_core.oracle.simulate import simulate
from roam_core.ordering.monolithic import solve_monolithic
from roam_core.ordering.registry import (
    COMPOSITE_METHODS,
    DEFAULT_METHODS,
    ORDER_METHODS,
    best_heuristic_order,
    run_method,
)
from roam_core.planner import make_plan
from roam_core.planner.config import PlannerConfig

__all__ = [
    "CSV_COLUMNS",
    "DEFAULT_BENCH_METHODS",
    "LAYOUTS",
    "SUITES",
    "BenchCase",
    "BenchRow",
    "GraphBaseline",
    "bench_graph",
    "graph_baseline",
    "read_csv",
    "run_bench",
    "sample_graph_cases",
    "write_csv",
    "write_markdown",
]

_logger = logging.getLogger(__name__)

MIB = 1 << 20

#: Suites understood by ``roam bench``.
SUITES = ("roam", "quick", "gpt2xl")

#: Every baseline, the composites, the best cheap order, the monolithic ILP and ROAM.
DEFAULT_BENCH_METHODS: tuple[str, ...] = (*DEFAULT_METHODS, *COMPOSITE_METHODS,
                                          "lescea+llfb", "best_heuristic", "monolithic",
                                          "roam")

_COMPOSITE_MEMBERS = {"inductor": ("lpmf", "bfs", "dfs"),
                      "xla": ("xla_list", "xla_dfs", "xla_postorder")}

#: Columns of the CSV, in order.
CSV_COLUMNS = (
    "graph", "method", "n_ops", "peak_bytes", "arena_bytes", "seconds", "status",
    "resident_bytes", "lower_bound_bytes", "eager_peak_bytes", "eager_allocated_bytes",
    "eager_reserved_bytes", "moved_state_peak_bytes", "cut_vs_eager_allocated",
    "cut_vs_eager_reserved", "cut_vs_moved_state", "peak_over_lb", "note",
)


@dataclass(frozen=True, slots=True)
class BenchCase:
    """One graph to benchmark; ``load`` builds it (so suites can be listed cheaply)."""

    name: str
    load: Callable[[], Graph]


@dataclass(frozen=True, slots=True)
class GraphBaseline:
    """Per-graph reference figures (bytes, resident included)."""

    n_ops: int
    resident_bytes: int
    eager_peak_bytes: int
    eager_allocated_bytes: int | None
    eager_reserved_bytes: int | None
    moved_state_peak_bytes: int | None
    lower_bound_bytes: int | None
    seconds: float


@dataclass(frozen=True, slots=True)
class BenchRow:
    """One (graph, method) result; see :data:`CSV_COLUMNS`.

    ``peak_bytes`` is the simulated peak of the method's order; ``arena_bytes`` its layout
    size when it has one.  ``status`` is ``"ok"``, ``"skipped"`` or ``"failed"`` (or a solver
    status such as ``"optimal"``).
    """

    graph: str
    method: str
    n_ops: int
    peak_bytes: int | None
    arena_bytes: int | None
    seconds: float
    status: str
    resident_bytes: int
    lower_bound_bytes: int | None
    eager_peak_bytes: int
    eager_allocated_bytes: int | None
    eager_reserved_bytes: int | None
    moved_state_peak_bytes: int | None
    cut_vs_eager_allocated: float | None
    cut_vs_eager_reserved: float | None
    cut_vs_moved_state: float | None
    peak_over_lb: float | None
    note: str = ""

    @property
    def memory_bytes(self) -> int | None:
        """``arena_bytes`` when there is a layout, else ``peak_bytes``."""
        return self.arena_bytes if self.arena_bytes is not None else self.peak_bytes


# ------------------------------------------------------------------ baselines
def graph_baseline(graph: Graph, alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES) -> GraphBaseline:
    """Eager figures and the lower bound of ``graph``.

    The bound is the best of the update-group, live-set, chain-group and forward-value
    choice bounds (all valid for every order).

    Examples
    --------
    >>> from roam_core.model.samples import tiny_train_step
    >>> b = graph_baseline(tiny_train_step())
    >>> b.eager_peak_bytes, b.eager_allocated_bytes, b.lower_bound_bytes
    (3072, 3072, 3072)
    """
    t0 = time.perf_counter()
    eager = simulate(graph, alignment_bytes=alignment_bytes).peak_bytes
    a = simulate_allocator(graph)
    allocated, reserved = a.peak_allocated_bytes, a.peak_reserved_bytes
    moved = simulate(graph, run_method(graph, "eager_moved_state", alignment_bytes=alignment_bytes),
                     alignment_bytes=alignment_bytes).peak_bytes
    from roam_core.oracle.bounds import (
        chain_group_lower_bound,
        choice_lower_bound,
        forward_value_groups,
    )

    fv_groups = forward_value_groups(graph)
    bound = max(best_lower_bound(graph, alignment_bytes).bound_bytes,
                live_set_lower_bound(graph, alignment_bytes).bound_bytes,
                chain_group_lower_bound(graph, None, alignment_bytes).bound_bytes,
                choice_lower_bound(graph, alignment_bytes, groups=fv_groups).bound_bytes
                if fv_groups else 0)
    return GraphBaseline(
        n_ops=len(graph.ops), resident_bytes=graph.resident_bytes(alignment_bytes),
        eager_peak_bytes=eager, eager_allocated_bytes=allocated, eager_reserved_bytes=reserved,
        moved_state_peak_bytes=moved, lower_bound_bytes=bound,
        seconds=time.perf_counter() - t0)


def _cut(memory: int | None, ref: int | None) -> float | None:
    if memory is None or not ref:
        return None
    return round(1.0 - memory / ref, 6)


def _row(graph: Graph, base: GraphBaseline, method: str, peak: int | None,
         arena: int | None, seconds: float, status: str, note: str = "") -> BenchRow:
    memory = arena if arena is not None else peak
    return BenchRow(
        graph=graph.name, method=method, n_ops=base.n_ops, peak_bytes=peak, arena_bytes=arena,
        seconds=round(seconds, 4), status=status, resident_bytes=base.resident_bytes,
        lower_bound_bytes=base.lower_bound_bytes, eager_peak_bytes=base.eager_peak_bytes,
        eager_allocated_bytes=base.eager_allocated_bytes,
        eager_reserved_bytes=base.eager_reserved_bytes,
        moved_state_peak_bytes=base.moved_state_peak_bytes,
        cut_vs_eager_allocated=_cut(memory, base.eager_allocated_bytes),
        cut_vs_eager_reserved=_cut(memory, base.eager_reserved_bytes),
        cut_vs_moved_state=_cut(memory, base.moved_state_peak_bytes),
        peak_over_lb=(round(memory / base.lower_bound_bytes, 6)
                      if memory is not None and base.lower_bound_bytes else None),
        note=note)


#: Layouts for plain orders: the greedy-by-size arena, ROAM's LLFB baseline, or the best.
LAYOUTS = ("best", "greedy", "llfb", "none")


def _order_arena(graph: Graph, order: Order, layout: str = "best") -> tuple[int | None, str]:
    """Arena bytes of a plain order with a baseline layout, and the layout's name.

    ``greedy`` is :func:`roam_core.layout.arena_layout.greedy_arena` (TFLite/XLA greedy by
    size), ``llfb``
    ROAM's long-lived-first baseline (:mod:`roam_core.layout.baseline_layouts`), ``best`` the
    smaller of the two; ``(None, "")`` when ``layout == "none"`` or every layout failed.
    """
    if layout == "none":
        return None, ""
    found: list[tuple[int, str]] = []
    if layout in ("best", "greedy"):
        try:
            found.append((int(greedy_arena(graph, order).arena_bytes), "greedy"))
        except Exception as e:  # a layout is optional: never sink the bench row
            _logger.warning("greedy arena failed on %s: %s", graph.name, e)
    if layout in ("best", "llfb"):
        try:
            found.append((int(baseline_layout(graph, order, "llfb").arena_bytes), "llfb"))
        except Exception as e:
            _logger.warning("llfb layout failed on %s: %s", graph.name, e)
    if not found:
        return None, ""
    return min(found)


# ------------------------------------------------------------------ methods
def _run_planner(graph: Graph, method: str, time_limit_s: float | None,
                 executor: cf.Executor | None = None) -> tuple[Order, int, int | None, str, str]:
    plan = make_plan(graph, PlannerConfig(time_limit_s=time_limit_s), method=method,
                     executor=executor)
    unfinished = (SolveStatus.TIMEOUT, SolveStatus.UNKNOWN, SolveStatus.CANCELLED)
    status = "partial" if any(r.status in unfinished for r in plan.provenance) else "ok"
    note = "; ".join(plan.notes)
    return plan.order, plan.planned_peak_bytes, plan.arena_bytes, status, note


def bench_graph(
    graph: Graph,
    methods: Sequence[str] = DEFAULT_BENCH_METHODS,
    *,
    time_limit_s: float | None = None,
    monolithic_max_ops: int = 400,
    layout: str = "best",
    progress: Callable[[str], None] | None = None,
    baseline: GraphBaseline | None = None,
    executor: cf.Executor | None = None,
) -> list[BenchRow]:
    """Run ``methods`` on one graph; per-method failures become ``failed`` rows.

    Parameters
    ----------
    graph : Graph
        The graph.
    methods : sequence of str
        Names from :data:`~roam_core.ordering.registry.ORDER_METHODS`, ``"best_heuristic"``,
        ``"monolithic"`` or ``"roam"``.
    time_limit_s : float, optional
        Solver budget for ``monolithic`` (default 60 s) and ``roam`` (planner default).
    monolithic_max_ops : int
        Larger graphs get a ``skipped`` monolithic row.
    layout : str
        Layout of plain orders (one of :data:`LAYOUTS`; plans bring their own).
    progress : callable, optional
        Called with one line per finished method.
    baseline : GraphBaseline, optional
        Precomputed reference figures.
    executor : concurrent.futures.Executor, optional
        Where the planner rows solve their sub-tasks (default: the planner's own pool).

    Returns
    -------
    list of BenchRow

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> rows = bench_graph(diamond(), ["eager", "lpmf", "inductor"], layout="none")
    >>> [(r.method, r.peak_bytes, r.status) for r in rows]
    [('eager', 1536, 'ok'), ('lpmf', 1536, 'ok'), ('inductor', 1536, 'ok')]
    """
    bench = _GraphBench(graph, baseline or graph_baseline(graph), layout, time_limit_s,
                        monolithic_max_ops, executor)
    rows: list[BenchRow] = []

    def emit(row: BenchRow) -> None:
        rows.append(row)
        bench.done[row.method] = row
        if progress is not None:
            mem = row.memory_bytes
            text = f"{mem / MIB:.1f} MiB" if mem is not None else row.status
            progress(f"{graph.name}: {row.method} {text} ({row.seconds:.2f} s)"
                     + (f" [{row.note}]" if row.note else ""))

    for method in methods:
        t0 = time.perf_counter()
        try:
            emit(bench.row(method, t0))
        except Exception as e:  # the harness isolates every method's failure (logged)
            _logger.warning("bench: %s failed on %s: %s", method, graph.name, e)
            emit(_row(graph, bench.base, method, None, None, time.perf_counter() - t0,
                      "failed", str(e)[:200]))
    return rows


def _note(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


class _GraphBench:
    """The methods of :func:`bench_graph` on one graph: one row each, layouts shared."""

    def __init__(self, graph: Graph, base: GraphBaseline, layout: str,
                 time_limit_s: float | None, monolithic_max_ops: int,
                 executor: cf.Executor | None) -> None:
        self.graph, self.base, self.layout = graph, base, layout
        self.time_limit_s, self.monolithic_max_ops = time_limit_s, monolithic_max_ops
        self.executor = executor
        self.done: dict[str, BenchRow] = {}  # method -> its row, once emitted
        self._arenas: dict[tuple[Order, str], tuple[int | None, str]] = {}

    def arena_of(self, order: Order, how: str | None = None) -> tuple[int | None, str]:
        """Arena of ``order`` with layout ``how`` (default: the bench's), computed once."""
        how = self.layout if how is None else how
        if (order, how) not in self._arenas:
            self._arenas[order, how] = _order_arena(self.graph, order, how)
        return self._arenas[order, how]

    def row(self, method: str, t0: float) -> BenchRow:
        """The row of ``method`` (started at ``t0``); raises what the method raises."""
        graph, base = self.graph, self.base
        if method in _COMPOSITE_MEMBERS and all(
                m in self.done and self.done[m].peak_bytes is not None
                for m in _COMPOSITE_MEMBERS[method]):
            members = [self.done[m] for m in _COMPOSITE_MEMBERS[method]]
            best = min(members, key=_peak_of)
            return _row(graph, base, method, best.peak_bytes, best.arena_bytes,
                        sum(r.seconds for r in members), "ok", f"best: {best.method}")
        if method.partition("+")[0] in ORDER_METHODS:
            # "name+layout" fixes the layout of that row (lescea+llfb: ROAM's baseline)
            name, _, fixed = method.partition("+")
            order = run_method(graph, name)
            seconds = time.perf_counter() - t0
            peak = simulate(graph, order).peak_bytes
            arena, how = self.arena_of(order, fixed or self.layout)
            return _row(graph, base, method, peak, arena, seconds, "ok",
                        _note(how and f"layout {how}"))
        if method == "best_heuristic":
            r = best_heuristic_order(graph)
            seconds = time.perf_counter() - t0
            arena, how = self.arena_of(r.order)
            return _row(graph, base, method, r.profile.peak_bytes, arena, seconds, "ok",
                        _note(f"best: {r.method}", how and f"layout {how}"))
        if method == "monolithic":
            return self._monolithic_row()
        order, peak, plan_arena, status, note = _run_planner(graph, method, self.time_limit_s,
                                                             self.executor)
        seconds = time.perf_counter() - t0
        return _row(graph, base, method, peak, plan_arena, seconds, status, note)

    def _monolithic_row(self) -> BenchRow:
        graph, base, max_ops = self.graph, self.base, self.monolithic_max_ops
        if len(graph.ops) > max_ops:
            return _row(graph, base, "monolithic", None, None, 0.0, "skipped",
                        f"more than {max_ops} ops")
        r = solve_monolithic(graph, time_limit_s=self.time_limit_s or 60.0, max_ops=max_ops,
                             lower_bound_bytes=base.lower_bound_bytes)
        arena, how = self.arena_of(r.order)
        return _row(graph, base, "monolithic", r.peak_bytes, arena, r.wall_time_s, r.status,
                    _note(f"bound {r.best_bound_bytes / MIB:.1f} MiB", how and f"layout {how}"))


def _peak_of(row: BenchRow) -> int:
    """Sort key of composite members (each has a peak: the caller checked)."""
    assert row.peak_bytes is not None
    return row.peak_bytes


def run_bench(
    cases: Iterable[BenchCase],
    methods: Sequence[str] = DEFAULT_BENCH_METHODS,
    *,
    time_limit_s: float | None = None,
    monolithic_max_ops: int = 400,
    layout: str = "best",
    progress: Callable[[str], None] | None = None,
    on_rows: Callable[[list[BenchRow]], None] | None = None,
    executor: cf.Executor | None = None,
) -> list[BenchRow]:
    """Benchmark every case; ``on_rows`` sees the rows so far after each graph.

    ``executor`` is handed to every planner row (:func:`bench_graph`).

    A case whose graph cannot be loaded is reported through ``progress`` and skipped.
    """
    rows: list[BenchRow] = []
    for case in cases:
        t0 = time.perf_counter()
        try:
            graph = case.load()
        except (RoamError, OSError, ValueError, RuntimeError) as e:
            _logger.warning("bench: cannot load %s: %s", case.name, e)
            if progress is not None:
                progress(f"{case.name}: cannot load ({e})")
            continue
        if progress is not None:
            progress(f"{case.name}: {len(graph.ops)} ops loaded in "
                     f"{time.perf_counter() - t0:.1f} s; baseline figures ...")
        base = graph_baseline(graph)
        rows += bench_graph(graph, methods, time_limit_s=time_limit_s,
                            monolithic_max_ops=monolithic_max_ops, layout=layout,
                            progress=progress, baseline=base, executor=executor)
        if on_rows is not None:
            on_rows(rows)
    return rows


# ------------------------------------------------------------------ suites
def _origin_of(path: str) -> dict[str, object]:
    """The ``origin`` record of a graph file without building the graph."""
    if path.endswith(".gz"):
        with gzip.open(path, "rt") as f:
            data = json.load(f)
    else:
        with open(path) as f:
            data = json.load(f)
    origin = data.get("origin") or data.get("graph", {}).get("origin") or {}
    return dict(origin) if isinstance(origin, dict) else {}


def sample_graph_cases(
    sample_dir: str,
    *,
    setting: str | None = None,
    models: Sequence[str] | None = None,
    configs: Sequence[tuple[str, int]] | None = None,
) -> list[BenchCase]:
    """Committed graph files of ``sample_dir`` whose origin matches, sorted by size.

    Parameters
    ----------
    sample_dir : str
        Folder holding ``*.json`` / ``*.json.gz`` graph files.
    setting : str, optional
        Keep graphs whose ``origin["setting"]`` equals it.
    models : sequence of str, optional
        Keep graphs of these zoo models.
    configs : sequence of (model, batch size), optional
        Keep only these configurations (and order the cases like them).
    """
    from roam_core.formats.graph_io import load_graph

    found: list[tuple[int, str, BenchCase]] = []
    paths = sorted(glob.glob(os.path.join(sample_dir, "*.json.gz"))
                   + glob.glob(os.path.join(sample_dir, "*.json")))
    for path in paths:
        try:
            origin = _origin_of(path)
        except (OSError, ValueError) as e:
            _logger.warning("bench: unreadable graph file %s: %s", path, e)
            continue
        model, bs = origin.get("model"), origin.get("batch_size")
        if setting is not None and origin.get("setting") != setting:
            continue
        if models is not None and model not in models:
            continue
        rank = 0
        if configs is not None:
            if (model, bs) not in configs:
                continue
            rank = list(configs).index((model, bs))  # type: ignore[arg-type]  # JSON values
        name = os.path.basename(path).split(".json")[0]
        found.append((rank, name, BenchCase(name, functools.partial(load_graph, path))))
    found.sort(key=lambda x: (x[0], x[1]))
    return [c for _, _, c in found]


# ------------------------------------------------------------------ output
def write_csv(rows: Sequence[BenchRow], path: str) -> None:
    """Write rows with :data:`CSV_COLUMNS` (empty cells for missing values)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for r in rows:
            d = asdict(r)
            w.writerow({k: ("" if d[k] is None else d[k]) for k in CSV_COLUMNS})


def read_csv(path: str) -> list[dict[str, str]]:
    """The rows of a bench CSV as dicts of strings."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _mib(v: int | None) -> str:
    if v is None:
        return ""
    return f"{v / MIB:.1f}" if v >= 10 * MIB else f"{v / MIB:.3f}"


def _pct(v: float | None) -> str:
    return "" if v is None else f"{100 * v:.1f}%"


def write_markdown(rows: Sequence[BenchRow], path: str, title: str = "Ordering benchmark") -> None:
    """A markdown report: memory and peak pivots (graphs x methods), all rows, mean cuts."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    graphs = list(dict.fromkeys(r.graph for r in rows))
    methods = list(dict.fromkeys(r.method for r in rows))
    by = {(r.graph, r.method): r for r in rows}
    lines = [f"# {title}", "",
             "Memory in MiB including resident bytes (parameters, buffers, inputs): the arena "
             "size when the method produced a layout, else the simulated peak of its order. "
             "Cuts are `1 - memory / reference`. Best memory per graph in bold.", "",
             "## Memory per graph and method (MiB)", "",
             "| graph | ops | eager alloc | eager reserved | moved state | lower bound | "
             + " | ".join(methods) + " |",
             "|---|---:|---:|---:|---:|---:|" + "---:|" * len(methods)]
    for g in graphs:
        any_row = next(r for r in rows if r.graph == g)
        mems = [by[g, m].memory_bytes if (g, m) in by else None for m in methods]
        valid = [x for x in mems if x is not None]
        best = min(valid) if valid else None
        cells = []
        for x in mems:
            cell = _mib(x)
            cells.append(f"**{cell}**" if x is not None and x == best else cell)
        lines.append(f"| {g} | {any_row.n_ops} | {_mib(any_row.eager_allocated_bytes)} | "
                     f"{_mib(any_row.eager_reserved_bytes)} | "
                     f"{_mib(any_row.moved_state_peak_bytes)} | "
                     f"{_mib(any_row.lower_bound_bytes)} | " + " | ".join(cells) + " |")
    lines += ["", "## Simulated peak of each order (MiB, no layout)", "",
              "| graph | " + " | ".join(methods) + " |", "|---|" + "---:|" * len(methods)]
    for g in graphs:
        peaks = [by[g, m].peak_bytes if (g, m) in by else None for m in methods]
        valid = [x for x in peaks if x is not None]
        best = min(valid) if valid else None
        cells = [f"**{_mib(x)}**" if x is not None and x == best else _mib(x) for x in peaks]
        lines.append(f"| {g} | " + " | ".join(cells) + " |")
    lines += ["", "## All rows", "",
              "| graph | method | peak MiB | arena MiB | cut vs eager alloc | "
              "cut vs eager reserved | cut vs moved state | memory / LB | seconds | status | "
              "note |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        lines.append(
            f"| {r.graph} | {r.method} | {_mib(r.peak_bytes)} | {_mib(r.arena_bytes)} | "
            f"{_pct(r.cut_vs_eager_allocated)} | {_pct(r.cut_vs_eager_reserved)} | "
            f"{_pct(r.cut_vs_moved_state)} | "
            f"{'' if r.peak_over_lb is None else f'{r.peak_over_lb:.3f}'} | {r.seconds:.2f} | "
            f"{r.status} | {r.note.replace('|', '/')} |")
    lines += _roam_summary(rows)
    means = _mean_cuts(rows)
    if means:
        lines += ["", "## Mean cut per method (graphs where it ran)", "",
                  "| method | graphs | vs eager alloc | vs eager reserved | vs moved state |",
                  "|---|---:|---:|---:|---:|"]
        for m, (n, a, rs, ms) in means.items():
            lines.append(f"| {m} | {n} | {_pct(a)} | {_pct(rs)} | {_pct(ms)} |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def _roam_summary(rows: Sequence[BenchRow], method: str = "roam") -> list[str]:
    """Cuts of ``method`` against each reference, per graph and on average (paper-style)."""
    by = {(r.graph, r.method): r for r in rows}
    refs = [m for m in ("lescea+llfb", "best_heuristic", "monolithic")
            if any(r.method == m for r in rows)]
    graphs = [g for g in dict.fromkeys(r.graph for r in rows)
              if (g, method) in by and by[g, method].memory_bytes is not None]
    if not graphs:
        return []
    cols = ["eager allocated", "eager reserved", "moved state", *refs]
    out = ["", f"## {method} against the references (cut of memory)", "",
           "`proven gap` = the order's simulated peak / the best proven lower bound "
           "(live-set, update-group and chain-group bounds; 1.0000 = proven optimal order).",
           "",
           "| graph | " + " | ".join(cols) + " | proven gap |",
           "|---|" + "---:|" * len(cols) + "---:|"]
    sums: list[list[float]] = [[] for _ in cols]
    for g in graphs:
        r = by[g, method]
        mem = r.memory_bytes
        cuts = [r.cut_vs_eager_allocated, r.cut_vs_eager_reserved, r.cut_vs_moved_state]
        for m in refs:
            ref = by[g, m].memory_bytes if (g, m) in by else None
            cuts.append(_cut(mem, ref))
        for i, c in enumerate(cuts):
            if c is not None:
                sums[i].append(c)
        gap = (f"{r.peak_bytes / r.lower_bound_bytes:.4f}"
               if r.peak_bytes and r.lower_bound_bytes else "")
        out.append(f"| {g} | " + " | ".join(_pct(c) for c in cuts) + f" | {gap} |")
    out.append("| **mean** | " + " | ".join(
        f"**{_pct(sum(v) / len(v))}**" if v else "" for v in sums) + " | |")
    return out


def _mean_cuts(rows: Sequence[BenchRow]) -> dict[str, tuple[int, float | None, float | None,
                                                            float | None]]:
    out = {}
    for m in dict.fromkeys(r.method for r in rows):
        sel = [r for r in rows if r.method == m and r.memory_bytes is not None]
        if not sel:
            continue

        def mean(vals: list[float | None]) -> float | None:
            xs = [v for v in vals if v is not None]
            return sum(xs) / len(xs) if xs else None

        out[m] = (len(sel), mean([r.cut_vs_eager_allocated for r in sel]),
                  mean([r.cut_vs_eager_reserved for r in sel]),
                  mean([r.cut_vs_moved_state for r in sel]))
    return out

