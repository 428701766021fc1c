"""A data-parallel rank's step in the app: the setting shown, communication in its colour."""

from __future__ import annotations

from pathlib import Path

from app.analysis import planner, settings
from app.core import state
from app.figures.style import KIND_COLORS
from app.views.curves import data as curves_data
from app.views.summary import data as summary_data
from roam_core.model.graph import Graph, Op, OpId, Phase, Tensor, TensorKind
from roam_core.model.parallel import ParallelSetting

AG = "_c10d_functional.all_gather_into_tensor.default"


def _rank_graph() -> Graph:
    """shard -> all-gather (communication) -> use -> loss, one rank of FSDP W=4."""
    f = Phase.FORWARD
    ts = [Tensor("w", 1024, "float32", (256,), TensorKind.PARAMETER, None, name="fc.weight"),
          Tensor("x", 4096, "float32", (1024,), TensorKind.INPUT, None),
          Tensor("ag", 4096, "float32", (1024,), TensorKind.COMMUNICATION, OpId("ag")),
          Tensor("y", 4096, "float32", (1024,), TensorKind.ACTIVATION, OpId("mul")),
          Tensor("loss", 4, "float32", (), TensorKind.OUTPUT, OpId("sum"))]
    ops = [Op(OpId("ag"), AG, f, ("w",), ("ag",)),
           Op(OpId("mul"), "aten.mul.Tensor", f, ("ag", "x"), ("y",)),
           Op(OpId("sum"), "aten.sum.default", Phase.LOSS, ("y",), ("loss",))]
    return Graph.build(ops, ts, outputs=["loss"], name="rank",
                       origin={"source": "custom",
                               "parallel": ParallelSetting("fsdp", 4).to_dict()})


def test_every_kind_has_its_colour() -> None:
    assert set(KIND_COLORS) == {k.value for k in TensorKind}
    assert KIND_COLORS["communication"] not in (
        v for k, v in KIND_COLORS.items() if k != "communication")


def test_summary_shows_the_parallel_setting(cache_dir: Path) -> None:
    g = _rank_graph()
    rows = dict(summary_data.summary_rows(state.put_graph(g), None, "eager"))
    assert rows["parallel"].startswith("fsdp, world size 4")
    assert "per rank" in rows["parallel"]
    assert rows["communication buffers"].startswith("4.00 KiB")


def test_curves_draw_the_communication_buffers(cache_dir: Path) -> None:
    g = _rank_graph()
    plan = planner.run_planner(g, settings.PlanSettings(method="eager", time_limit_s=1.0))
    fig = curves_data.curves_figure(state.put_graph(g), state.put_plan(plan), "eager",
                                    None, None)
    comm = next(t for t in fig.data if t.name == "communication (planned)")
    assert comm.line.color == KIND_COLORS["communication"]
    assert max(comm.y) > 0
