"""Layer 6, the benchmark harness behind ``roam bench``: suites of graphs, every ordering
method and the planner scored by the one simulator, CSV and markdown tables."""

from roam_core.bench.harness import (
    CSV_COLUMNS,
    DEFAULT_BENCH_METHODS,
    LAYOUTS,
    SUITES,
    BenchCase,
    BenchRow,
    GraphBaseline,
    bench_graph,
    graph_baseline,
    read_csv,
    run_bench,
    sample_graph_cases,
    write_csv,
    write_markdown,
)

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
