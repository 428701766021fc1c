"""Benchmark harness: rows, CSV columns, markdown, suites from graph files, the CLI."""

from __future__ import annotations

import csv
from dataclasses import fields, replace

from roam_core.bench import (
    CSV_COLUMNS,
    BenchRow,
    bench_graph,
    graph_baseline,
    read_csv,
    run_bench,
    sample_graph_cases,
    write_csv,
    write_markdown,
)
from roam_core.cli import main
from roam_core.formats.graph_io import save_graph
from roam_core.model.samples import diamond, tiny_train_step
from roam_core.oracle.simulate import simulate
from tests.builders import two_param_step


def test_row_fields_are_the_csv_columns():
    assert tuple(f.name for f in fields(BenchRow)) == CSV_COLUMNS
    required = {"graph", "method", "peak_bytes", "arena_bytes", "seconds", "lower_bound_bytes",
                "eager_allocated_bytes", "eager_reserved_bytes", "cut_vs_eager_allocated",
                "cut_vs_eager_reserved", "cut_vs_moved_state", "peak_over_lb"}
    assert required <= set(CSV_COLUMNS)


def test_bench_graph_rows_and_cuts():
    g = two_param_step("adam", act_bytes=512)
    rows = bench_graph(g, ["eager", "lpmf", "bfs", "dfs", "inductor", "lpmf_updates",
                           "best_heuristic", "monolithic"], time_limit_s=5, layout="none")
    by = {r.method: r for r in rows}
    eager = simulate(g).peak_bytes
    assert by["eager"].peak_bytes == eager
    assert by["inductor"].peak_bytes == min(by[m].peak_bytes for m in ("lpmf", "bfs", "dfs"))
    assert by["best_heuristic"].peak_bytes <= by["lpmf_updates"].peak_bytes
    assert by["monolithic"].peak_bytes <= by["best_heuristic"].peak_bytes
    r = by["lpmf_updates"]
    assert r.cut_vs_eager_allocated == round(1 - r.peak_bytes / r.eager_allocated_bytes, 6)
    assert r.peak_over_lb >= 1.0
    assert all(x.status in ("ok", "optimal", "feasible", "hint") for x in rows)


def test_monolithic_skipped_on_big_graphs_and_failures_isolated():
    g = two_param_step("sgd")
    rows = bench_graph(g, ["monolithic", "no_such_method"], monolithic_max_ops=3,
                       layout="none")
    assert rows[0].status == "skipped"
    # an unknown name goes to the planner: skipped when absent, failed when it rejects it
    assert rows[1].status in ("skipped", "failed")


def test_csv_and_markdown(tmp_path):
    g = tiny_train_step()
    rows = bench_graph(g, ["eager", "lescea"], layout="none")
    rows.append(replace(rows[0], method="broken", peak_bytes=None, status="failed",
                        note="a|b"))
    write_csv(rows, str(tmp_path / "o.csv"))
    with open(tmp_path / "o.csv") as f:
        header = next(csv.reader(f))
    assert tuple(header) == CSV_COLUMNS
    back = read_csv(str(tmp_path / "o.csv"))
    assert [r["method"] for r in back] == ["eager", "lescea", "broken"]
    assert back[2]["peak_bytes"] == ""
    write_markdown(rows, str(tmp_path / "o.md"), "T")
    text = (tmp_path / "o.md").read_text()
    assert text.startswith("# T")
    assert "| tiny_train_step | 8 |" in text
    assert "a/b" in text


def test_sample_graph_cases_filter_by_origin(tmp_path):
    a = replace(two_param_step("adam"), origin={"source": "zoo", "model": "m", "batch_size": 1,
                                                "setting": "roam"})
    b = replace(diamond(), origin={"source": "zoo", "model": "m", "batch_size": 2,
                                   "setting": "steady"})
    save_graph(a, str(tmp_path / "a.json.gz"))
    save_graph(b, str(tmp_path / "b.json"))
    assert [c.name for c in sample_graph_cases(str(tmp_path))] == ["a", "b"]
    cases = sample_graph_cases(str(tmp_path), setting="roam")
    assert [c.name for c in cases] == ["a"]
    assert cases[0].load().fingerprint() == a.fingerprint()
    assert sample_graph_cases(str(tmp_path), configs=[("m", 2)])[0].name == "b"
    rows = run_bench(cases, ["eager"], layout="none")
    assert rows[0].eager_peak_bytes == graph_baseline(a).eager_peak_bytes


def test_cli_bench_on_files(tmp_path, capsys):
    path = tmp_path / "g.json.gz"
    save_graph(two_param_step("sgd"), str(path))
    code = main(["bench", "--graphs", str(path), "--methods", "eager,lpmf_updates,xla",
                 "--layout", "none", "--out", str(tmp_path), "--name", "t"])
    assert code == 0
    rows = read_csv(str(tmp_path / "t.csv"))
    assert [r["method"] for r in rows] == ["eager", "lpmf_updates", "xla"]
    assert (tmp_path / "t.md").exists()
    assert "3 rows (0 failed)" in capsys.readouterr().out
    assert main(["bench", "--graphs", str(path), "--methods", "nope", "--out",
                 str(tmp_path)]) == 2


def test_layouts_of_plain_orders():
    g = two_param_step("adam")
    best = bench_graph(g, ["lpmf_updates"], layout="best")[0]
    assert best.arena_bytes >= best.peak_bytes
    assert "layout" in best.note
    assert best.memory_bytes == best.arena_bytes
    for layout in ("greedy", "llfb"):
        one = bench_graph(g, ["lpmf_updates"], layout=layout)[0]
        assert one.arena_bytes >= best.arena_bytes
        assert f"layout {layout}" in one.note
        fixed = bench_graph(g, [f"lpmf_updates+{layout}"])[0]
        assert (fixed.method, fixed.arena_bytes) == (f"lpmf_updates+{layout}", one.arena_bytes)


def test_a_crashing_method_becomes_a_failed_row(monkeypatch):
    from roam_core.ordering import registry as heuristics

    def boom(graph, *, alignment_bytes=512):
        raise AssertionError("internal bug")

    monkeypatch.setitem(heuristics.ORDER_METHODS, "boom", boom)
    rows = bench_graph(diamond(), ["boom", "eager"], layout="none")
    assert [(r.method, r.status) for r in rows] == [("boom", "failed"), ("eager", "ok")]
    assert "internal bug" in rows[0].note


def test_markdown_summarises_roam_against_references(tmp_path):
    g = tiny_train_step()
    rows = bench_graph(g, ["lescea+llfb", "best_heuristic"], layout="none")
    rows.append(replace(rows[1], method="roam", arena_bytes=None,
                        peak_bytes=rows[1].peak_bytes // 2))
    write_markdown(rows, str(tmp_path / "o.md"))
    text = (tmp_path / "o.md").read_text()
    assert "## roam against the references" in text
    assert "| **mean** |" in text
    assert "50.0%" in text  # half of best_heuristic's memory
