"""Plan files: JSON round trip, gzip, typed errors, CSV export, and ``roam check``."""

from __future__ import annotations

import dataclasses
import gzip
import json

import pytest

from roam_core.base.errors import PlanFormatError
from roam_core.base.status import SolveStatus
from roam_core.cli import main
from roam_core.formats.dsa_csv import loads_problem
from roam_core.formats.graph_io import save_graph
from roam_core.formats.plan_io import (
    dumps_plan,
    load_plan,
    loads_plan,
    plan_to_csv,
    plan_to_dict,
    problem_from_plan,
    save_plan,
)
from roam_core.model.dsa import solution_from_problem
from roam_core.model.graph import ControlEdge, EdgeReason, OpId
from roam_core.model.plan import SolveRecord
from roam_core.model.samples import diamond, tiny_train_step
from roam_core.model.stage_cost import StageCost
from roam_core.oracle.validate import check_dsa_solution
from tests.builders import eager_greedy_plan as _plan


def _full_plan():  # type: ignore[no-untyped-def]
    g = tiny_train_step()
    return dataclasses.replace(
        _plan(g), solve_seconds=1.25, task_tree={"root": "t0", "subtasks": []},
        task_of_op={OpId("mm"): "t0"},
        extra_edges=(ControlEdge(OpId("mm"), OpId("relu"), EdgeReason.WEIGHT_UPDATE),),
        provenance=(SolveRecord("layout", "global", "optimal", 10, 10, 0.5, 3),
                    SolveRecord("order", "t0", "unknown", None, None, 0.1)),
        settings={"node_limit": 60, "nested": {"a": [1, 2]}}, notes=("hello",),
        stages=(StageCost("subtasks", 0.5, 0.4, 4096, 9, 0, "solves"),
                StageCost("layout.repair", 1.5, 1.25, 7680, 913, 10000, "nodes",
                          "good_enough")))


class TestRoundTrip:
    def test_every_field_survives(self) -> None:
        plan = _full_plan()
        assert loads_plan(dumps_plan(plan)) == plan

    def test_gzip_file(self, tmp_path) -> None:  # type: ignore[no-untyped-def]
        plan = _full_plan()
        save_plan(plan, tmp_path / "p.json.gz")
        assert gzip.decompress((tmp_path / "p.json.gz").read_bytes()).startswith(b"{")
        assert load_plan(tmp_path / "p.json.gz", tiny_train_step()) == plan

    def test_statuses_are_strings_in_the_file_and_enums_when_loaded(self) -> None:
        plan = dataclasses.replace(_full_plan(), provenance=tuple(
            SolveRecord("order", f"t{i}", s.value, None, None, 0.0)
            for i, s in enumerate(SolveStatus)))
        d = json.loads(dumps_plan(plan))
        assert [r["status"] for r in d["provenance"]] == [s.value for s in SolveStatus]
        back = loads_plan(json.dumps(d))  # what an old file (plain strings) holds
        assert [r.status for r in back.provenance] == list(SolveStatus)
        assert all(type(r.status) is SolveStatus for r in back.provenance)

    def test_unknown_status_is_named(self) -> None:
        d = plan_to_dict(_full_plan())
        d["provenance"][0]["status"] = "splendid"
        with pytest.raises(PlanFormatError, match=r"entry 0 has status .splendid.; known: "
                                                  "optimal, feasible"):
            loads_plan(json.dumps(d))

    def test_a_plan_without_stages_loads_with_none(self) -> None:
        d = plan_to_dict(_full_plan())
        assert len(d["stages"]) == 2
        del d["stages"]  # a plan file written before stages were recorded
        assert loads_plan(json.dumps(d)).stages == ()

    def test_header(self) -> None:
        d = plan_to_dict(_full_plan())
        assert d["format"] == "roam-plan"
        assert d["schema_version"] == 2


class TestErrors:
    def test_fingerprint_mismatch(self) -> None:
        text = dumps_plan(_full_plan())
        with pytest.raises(PlanFormatError, match=r"plan was made for graph '\w+', not for "
                                                  r"this graph 'diamond'$"):
            loads_plan(text, diamond())

    @pytest.mark.parametrize(("edit", "words"), [
        (lambda d: d.pop("order"), "missing field 'order'"),
        (lambda d: d.update(format="roam-graph"), "'format'"),
        (lambda d: d.update(schema_version=99), "'schema_version'"),
        (lambda d: d.update(arena_bytes="big"), "'arena_bytes'"),
        (lambda d: d.update(arena_bytes=-1), "'arena_bytes' is negative"),
        (lambda d: d["offsets"].update(mm="x"), "'offsets' entry 'mm'"),
        (lambda d: d.update(order=[1, 2]), "'order'"),
        (lambda d: d.update(extra_edges=[{"src": "a"}]), "'extra_edges' entry 0"),
        (lambda d: d.update(provenance=[{"stage": "x"}]), "'provenance' entry 0"),
        (lambda d: d.update(live_bytes=[1.5]), "'live_bytes'"),
        (lambda d: d.update(stages=[{"wall_s": 1.0}]), "'stages' entry 0 is malformed"),
        (lambda d: d["stages"][1].update(stopped="bored"), "'stages' entry 1 has stopped"),
        (lambda d: d["stages"][0].update(work_done=-3), "'stages' entry 0 'work_done'"),
        (lambda d: d["stages"][0].update(wall_s=float("nan")), "'stages' entry 0 'wall_s'"),
        (lambda d: d.update(stages={}), "'stages' has type dict"),
    ])
    def test_malformed_field_is_named(self, edit, words) -> None:  # type: ignore[no-untyped-def]
        d = plan_to_dict(_full_plan())
        edit(d)
        with pytest.raises(PlanFormatError, match=words):
            loads_plan(json.dumps(d))

    def test_not_json(self) -> None:
        with pytest.raises(PlanFormatError, match="not valid JSON"):
            loads_plan(b"{nope")

    def test_bad_gzip(self) -> None:
        with pytest.raises(PlanFormatError, match="gzip"):
            loads_plan(b"\x1f\x8bgarbage")

    def test_missing_file(self, tmp_path) -> None:  # type: ignore[no-untyped-def]
        with pytest.raises(PlanFormatError, match="cannot read"):
            load_plan(tmp_path / "none.json")


class TestCsvExport:
    def test_csv_round_trip_is_a_valid_layout(self) -> None:
        g = tiny_train_step()
        plan = _plan(g)
        text = plan_to_csv(plan, g)
        assert text.splitlines()[0] == "id,lower,upper,size,alignment,offset"
        back = loads_problem(text)
        sol = solution_from_problem(back)
        assert sol is not None
        assert check_dsa_solution(back, sol) == []
        problem, solution = problem_from_plan(plan, g)
        assert [b.id for b in back.buffers] == [b.id for b in problem.buffers]
        assert sol.offsets == solution.offsets


class TestCheckCommand:
    def _files(self, tmp_path, plan=None):  # type: ignore[no-untyped-def]
        g = tiny_train_step()
        save_graph(g, tmp_path / "g.json")
        save_plan(plan or _plan(g), tmp_path / "p.json")
        return str(tmp_path / "g.json"), str(tmp_path / "p.json")

    def test_valid_plan_exit_0(self, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
        assert main(["check", *self._files(tmp_path)]) == 0
        out = capsys.readouterr().out
        assert out.startswith("OK:")
        assert len(out.strip().splitlines()) == 1

    def test_invalid_plan_exit_1(self, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
        plan = _plan(tiny_train_step())
        offs = dict(plan.offsets)
        offs["relu"] = offs["mm"]
        assert main(["check", *self._files(tmp_path, dataclasses.replace(
            plan, offsets=offs))]) == 1
        out = capsys.readouterr().out
        assert "overlap\t" in out
        assert "relu" in out

    def test_other_graph_exit_1(self, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
        _gfile, pfile = self._files(tmp_path)
        save_graph(diamond(), tmp_path / "d.json")
        assert main(["check", str(tmp_path / "d.json"), pfile]) == 1
        assert "fingerprint" in capsys.readouterr().out

    def test_malformed_plan_exit_2(self, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
        gfile, _ = self._files(tmp_path)
        (tmp_path / "bad.json").write_text('{"format": "roam-plan"}')
        assert main(["check", gfile, str(tmp_path / "bad.json")]) == 2
        assert "schema_version" in capsys.readouterr().err
