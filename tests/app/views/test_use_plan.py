"""The "Use this plan" card: code and command lines from a graph's origin and a plan."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from app.views.use_plan import model

ZOO = {"source": "zoo", "model": "gpt2", "batch_size": 1, "seq_len": 128,
       "setting": "steady", "optimizer": "adamw", "attention": "sdpa"}


def test_cli_lines_reproduce_a_zoo_budget_plan() -> None:
    cli = model.cli_lines("gpt2-b1-t128-steady", ZOO, "roam",
                          {"time_limit_s": 5.0, "node_limit": 60, "seed": 0,
                           "budget_bytes": "auto"})
    assert cli.splitlines() == [
        "roam trace gpt2 -b 1 -t 128 --setting steady --optimizer adamw --attention sdpa "
        "-o gpt2-b1-t128-steady.json.gz",
        "roam plan gpt2-b1-t128-steady.json.gz -o gpt2-b1-t128-steady.plan.json "
        "--time-limit 5 --budget auto"]


def test_cli_lines_of_a_baseline_on_a_loaded_file() -> None:
    cli = model.cli_lines("my net", {"source": "custom"}, "eager",
                          {"node_limit": 12, "seed": 3, "budget_bytes": 2**20})
    assert cli == ("roam plan my_net.json.gz -o my_net.plan.json --method eager "
                   "--node-limit 12 --seed 3 --budget 1048576")


def test_python_code_is_python_and_names_the_plan() -> None:
    for origin in (ZOO, {"source": "custom"}):
        for recompute in (False, True):
            code = model.python_code("gpt2-b1-t128-steady", origin, recompute)
            ast.parse(code)
            assert 'rc.load_plan("gpt2-b1-t128-steady.plan.json")' in code
            assert "rc.PlannedStep(model, plan" in code
            assert ("apply_checkpoint_plan" in code) == recompute


def test_notes_say_what_the_lines_assume() -> None:
    use = model.use_plan("x", {**ZOO, "setting": "roam"}, "roam", {"time_limit_s": 1}, False)
    text = " ".join(use.notes)
    assert "--setting steady" in text
    assert "time limit" in text
    assert not model.use_plan("x", ZOO, "roam", {}, False).notes


@pytest.mark.slow
def test_the_python_code_trains_with_the_plan(tmp_path: Path, monkeypatch: Any) -> None:
    """The card's code, run as shown, trains a zoo model with an exported plan."""
    pytest.importorskip("torch")
    from roam_core.formats.graph_io import load_graph
    from roam_core.formats.plan_io import dumps_plan
    from roam_core.planner import make_plan
    from roam_core.planner.config import PlannerConfig

    graph = load_graph(Path("sample_graphs/mlp-b8-steady.json.gz"))
    plan = make_plan(graph, PlannerConfig(time_limit_s=1.0, workers=1))
    (tmp_path / f"{graph.name}.plan.json").write_text(dumps_plan(plan))
    monkeypatch.chdir(tmp_path)
    scope: dict[str, Any] = {}
    exec(model.python_code(graph.name, graph.origin, False), scope)
    assert float(scope["loss"]) > 0


def test_a_mixed_precision_merged_trace_is_made_and_trained_as_traced() -> None:
    """A graph traced in bf16-mixed with merged casts: the trace line and PlannedStep say
    both (a plan of that step is refused by a PlannedStep built otherwise)."""
    origin = {**ZOO, "precision": "bf16-mixed", "merge_casts": True}
    cli = model.cli_lines("gpt2-b1-t128-steady", origin, "roam", {"time_limit_s": 5.0})
    assert "--precision bf16-mixed --merge-casts -o gpt2-b1-t128-steady.json.gz" in cli
    code = model.python_code("gpt2-b1-t128-steady", origin, False)
    ast.parse(code)
    assert "example_inputs=inputs, precision='bf16-mixed', merge_casts=True)" in code
    plain = model.python_code("gpt2-b1-t128-steady", ZOO, False)
    assert "precision=" not in plain
    assert "--precision" not in model.cli_lines("gpt2-b1-t128-steady", ZOO, "roam", {})
