"""The guided walkthrough: its steps, links and the teaching graphs' lessons."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from app.analysis import planner, settings
from app.core import ids, state
from app.services import planning as planning_service
from app.views.linking import view as linking_view
from app.views.walkthrough import data as walkthrough_data
from app.views.walkthrough import model as walkthrough_model
from app.views.walkthrough import view as walkthrough_view
from roam_core.base.catalog import ZOO_NAMES
from roam_core.formats.graph_io import load_graph
from roam_core.model.samples import tiny_train_step
from tests.app.helpers import (
    run,
)


def test_walkthrough_on_a_teaching_graph(cache_dir: Path) -> None:
    """The four steps, open on a teaching graph; its tensors are clickable everywhere."""

    gk = state.put_graph(tiny_train_step())
    pk = planning_service.plan_graph(gk, settings.PlanSettings(time_limit_s=2.0, node_limit=3))
    g = {"key": gk, "name": "tiny_train_step"}
    body = walkthrough_view.render_walkthrough(g, pk, "eager")
    text = str(body)
    assert "open=True" in text
    for n in ("1. The eager (program order) peaks at step", "2. ", "3. The layout packs",
              "4. Recomputation"):
        assert n in text
    open_, steps = walkthrough_data.walkthrough_steps(gk, pk, "eager")
    assert open_
    hits = [t for _, _, links in steps for t, _ in links]
    assert hits
    hit = {"index": f"tensor:{hits[0]}", "step": 0, "type": ids.TOUR_HIT}
    assert run(linking_view.on_select, hit, 1, None, None, None, [], g, [1]) == {
        "kind": "tensor", "id": hits[0]}
    rng, _ = run(linking_view.on_range, hit, 1, *([None] * 8), pk, g, "eager")
    assert rng is not None
    assert walkthrough_view.render_walkthrough(g, None, "eager") == []
    idents = [(c.id["index"], c.id["step"]) for c in _components(body)
              if isinstance(getattr(c, "id", None), dict)]
    assert len(idents) == len(set(idents))  # a tensor in two steps: still unique ids


def test_lifetime_changes_rank_by_bytes_times_steps(cache_dir: Path) -> None:

    g = tiny_train_step()
    plan = planner.run_planner(g, settings.PlanSettings(time_limit_s=2.0))
    order = tuple(reversed(plan.order))  # not valid: only lifetimes matter here
    rows = walkthrough_model.lifetime_changes(g, plan, order)
    assert [abs(r[3]) for r in rows] == sorted((abs(r[3]) for r in rows), reverse=True)
    assert all(r[1] != r[2] for r in rows)


def _components(node: Any) -> Iterator[Any]:
    yield node
    kids = getattr(node, "children", None)
    for kid in kids if isinstance(kids, (list, tuple)) else [kids]:
        if hasattr(kid, "to_plotly_json"):
            yield from _components(kid)


def test_walkthrough_links_are_tensor_ids_labelled_by_name(cache_dir: Path) -> None:
    """On a traced graph the buttons read parameter names, and select by storage id."""
    from roam_core.formats.graph_io import load_graph

    g = load_graph(Path(__file__).resolve().parents[3] / "sample_graphs" /
                   "mlp-b8-steady.json.gz")
    gk = state.put_graph(g)
    pk = planning_service.plan_graph(gk, settings.PlanSettings(time_limit_s=2.0))
    _, steps = walkthrough_data.walkthrough_steps(gk, pk, "eager")
    links = [link for _, _, ls in steps for link in ls]
    assert links
    assert all(tid in g.tensors for tid, _ in links)
    assert any(g.tensors[tid].name and label.startswith(g.tensors[tid].name)
               for tid, label in links)


SAMPLES = Path(__file__).resolve().parents[3] / "sample_graphs"


def test_every_teach_model_has_a_lesson_and_is_a_teaching_graph() -> None:
    teach = {n for n in ZOO_NAMES if n.startswith("teach_")}
    assert teach == set(walkthrough_model.TEACHING_LESSONS)
    assert teach <= set(walkthrough_model.TEACHING_GRAPHS)
    assert walkthrough_model.teaching_lesson("mlp-b8-steady") is None


def test_walkthrough_opens_on_teach_order_with_its_lesson(cache_dir: Path) -> None:
    g = load_graph(SAMPLES / "teach_order-b256-steady.json.gz")
    gk = state.put_graph(g)
    pk = planning_service.plan_graph(gk, settings.PlanSettings(time_limit_s=2.0))
    open_, steps = walkthrough_data.walkthrough_steps(gk, pk, "eager")
    assert open_
    assert steps[0][1].startswith("What this graph teaches: the order.")
    text = str(walkthrough_view.render_walkthrough({"key": gk, "name": g.name}, pk, "eager"))
    assert "What this graph teaches: the order." in text
    assert "1. The eager (program order) peaks" in text
