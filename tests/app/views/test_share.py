"""Links that reopen a view: the address's query string and what a server can restore."""

from __future__ import annotations

import pytest

from app.core import state
from app.views.share import model
from app.views.share.data import restorable
from roam_core.model.samples import chain3, diamond


def test_encode_decode_round_trip() -> None:
    q = model.encode("g-1", "p-2", [3.0, 40.5], {"kind": "tensor", "id": "a b"})
    assert model.decode(q) == model.UrlState("g-1", "p-2", (3.0, 40.5), ("tensor", "a b"))
    assert model.decode(model.encode("g-1", None, None, {"kind": "module", "id": ""})) == \
        model.UrlState("g-1", None, None, ("module", ""))


@pytest.mark.parametrize("query", ["?x0=1", "?x0=a&x1=2", "?x0=inf&x1=2", "?x0=2&x1=2",
                                   "?sel=op:", "?sel=plan:x", "?graph="])
def test_malformed_parts_name_nothing(query: str) -> None:
    assert model.decode(query) == model.UrlState()


def test_restorable_keeps_only_what_this_server_has() -> None:
    g = state.put_graph(chain3())
    ok, note = restorable(model.UrlState(g, None, (1.0, 2.0), ("op", "nope")))
    assert ok == model.UrlState(g, None, (1.0, 2.0), None)  # no such op: no selection
    assert note == "opened chain3 from the link"
    gone, note = restorable(model.UrlState("g-" + "0" * 64, "p-1", (1.0, 2.0), None))
    assert gone == model.UrlState()
    assert "no longer on this server" in note
    from app.analysis.planner import run_planner
    from app.analysis.settings import PlanSettings

    other = state.put_plan(run_planner(diamond(), PlanSettings(method="eager")))
    kept, note = restorable(model.UrlState(g, other, None, None))  # a plan of another graph
    assert kept.plan_key is None
    assert "plan again" in note
