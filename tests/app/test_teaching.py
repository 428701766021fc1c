"""The walkthrough on a teach_* sample starts with what that graph teaches."""

from __future__ import annotations

from pathlib import Path

from app import analysis, callbacks, services, state
from app.planning import PlanSettings
from roam_core.base.catalog import ZOO_NAMES
from roam_core.formats.graph_io import load_graph

SAMPLES = Path(__file__).resolve().parents[2] / "sample_graphs"


def test_every_teach_model_has_a_lesson_and_is_a_teaching_graph() -> None:
    teach = {n for n in ZOO_NAMES if n.startswith("teach_")}
    assert teach == set(analysis.TEACHING_LESSONS)
    assert teach <= set(analysis.TEACHING_GRAPHS)
    assert analysis.teaching_lesson("mlp-b8-steady") is None


def test_walkthrough_opens_on_teach_order_with_its_lesson(cache_dir: Path) -> None:
    g = load_graph(SAMPLES / "teach_order-b256-steady.json.gz")
    gk = state.put_graph(g)
    pk = services.plan_graph(gk, PlanSettings(time_limit_s=2.0))
    open_, steps = services.walkthrough_steps(gk, pk, "eager")
    assert open_
    assert steps[0][1].startswith("What this graph teaches: the order.")
    text = str(callbacks.render_walkthrough({"key": gk, "name": g.name}, pk, "eager"))
    assert "What this graph teaches: the order." in text
    assert "1. The eager (program order) order peaks" in text
