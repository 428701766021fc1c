"""The Python API: a wrong argument type is a RoamError naming the argument; graphs with no
op or one op work through every command or are refused clearly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import roam_core as rc
from roam_core.base.errors import RoamError
from roam_core.cli import main
from roam_core.model.samples import chain3

CALLS = {
    "make_plan": lambda: rc.make_plan(None),
    "make_plan config": lambda: rc.make_plan(chain3(), config="fast"),
    "check_plan": lambda: rc.check_plan(None, None),
    "check_order": lambda: rc.check_order(None, ()),
    "check_arena": lambda: rc.check_arena(None, (), {}, 0, 512),
    "simulate": lambda: rc.simulate(None),
    "lifetimes": lambda: rc.lifetimes(None, ()),
    "expand_graph": lambda: rc.expand_graph(None, ()),
    "save_graph": lambda: rc.save_graph(None, "/tmp/x.json"),
    "load_graph": lambda: rc.load_graph(None),
    "loads_graph": lambda: rc.loads_graph(None),
    "dumps_graph": lambda: rc.dumps_graph(None),
    "save_plan": lambda: rc.save_plan(None, "/tmp/x.json"),
    "load_plan": lambda: rc.load_plan(3),
    "loads_plan": lambda: rc.loads_plan(None),
    "dumps_plan": lambda: rc.dumps_plan(None),
    "eager_report": lambda: rc.eager_report(None),
    "simulate_allocator": lambda: rc.simulate_allocator(None),
    "plan_arena": lambda: rc.plan_arena(None, ()),
    "solve_dsa": lambda: rc.solve_dsa(None),
    "live_set_lower_bound": lambda: rc.live_set_lower_bound(None),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_wrong_argument_types_are_roam_errors(name: str) -> None:
    with pytest.raises(RoamError):
        CALLS[name]()


def _write(tmp: Path, name: str, ops: list[dict[str, Any]], tensors: list[dict[str, Any]],
           outputs: list[str]) -> str:
    p = tmp / f"{name}.json"
    p.write_text(json.dumps({"format": "roam-graph", "schema_version": 2, "name": name,
                             "ops": ops, "tensors": tensors, "outputs": outputs}))
    return str(p)


@pytest.fixture
def tiny(tmp_path: Path) -> dict[str, str]:
    w = {"id": "w", "size_bytes": 1024, "dtype": "float32", "shape": [256],
         "kind": "parameter", "producer": None}
    x = {"id": "x", "size_bytes": 1024, "dtype": "float32", "shape": [256],
         "kind": "activation", "producer": "a"}
    relu = {"id": "a", "target": "aten.relu.default", "phase": "forward", "inputs": ["w"],
            "outputs": ["x"]}
    return {"zero": _write(tmp_path, "zero", [], [], []),
            "resident": _write(tmp_path, "resident", [], [w], []),
            "one": _write(tmp_path, "one", [relu], [w, x], ["x"])}


@pytest.mark.slow
@pytest.mark.parametrize("which", ["zero", "resident", "one"])
def test_tiny_graphs_plan_check_and_frontier(tiny: dict[str, str], which: str,
                                             tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    g, plan = tiny[which], str(tmp_path / f"{which}.plan.json")
    assert main(["info", g, "--json"]) == 0
    assert main(["plan", g, "-o", plan, "--no-progress", "--workers", "1"]) == 0
    assert main(["check", g, plan]) == 0
    assert main(["plan", g, "-o", plan, "--no-progress", "--budget", "auto"]) == 0
    assert main(["frontier", g, "--budgets", "2", "--no-min-cut", "--json"]) == 0
    status = main(["report", g, plan, "-o", str(tmp_path / "r.html")])
    err = capsys.readouterr().err
    if which == "one":
        assert status == 0
    else:  # nothing to draw: refused in one line
        assert status == 2
        assert "no ops" in err
    assert "Traceback" not in err
