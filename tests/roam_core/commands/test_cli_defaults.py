"""Defaults of the commands that surprised a newcomer: ``roam trace`` needs no batch size,
``roam bench`` never writes into the committed ``benchmarks/results`` by default."""

from __future__ import annotations

from roam_core.cli import build_parser


def test_trace_has_a_default_batch_size() -> None:
    args = build_parser().parse_args(["trace", "mlp"])
    assert args.batch_size == 1


def test_bench_writes_beside_the_committed_results_by_default() -> None:
    args = build_parser().parse_args(["bench", "--suite", "quick"])
    assert args.out == "bench"  # ./bench (git-ignored), not benchmarks/results
