"""Browser sessions: a graph, plan or snapshot is visible only to the session that stored it
(or to everyone when stored outside any session, as the start-up graph and plan are)."""

from __future__ import annotations

from pathlib import Path

import pytest
from dash._callback_context import context_value
from dash._utils import AttributeDict

from app.core import sessions, state
from app.services import plan_data
from roam_core.base.errors import GraphError, PlanFormatError
from roam_core.model.samples import tiny_train_step
from tests.app.helpers import planned_with_tree

A, B = "a" * 32, "b" * 32


def test_a_session_reads_only_its_own_graphs_and_plans(cache_dir: Path) -> None:
    graph, plan = planned_with_tree()
    public = state.put_graph(graph)  # outside any session: the start-up graph
    with sessions.acting_as(A):
        gk, pk = state.put_graph(graph), state.put_plan(plan)
        assert gk != public  # the same content, another owner: another key
        assert state.get_graph(gk).fingerprint() == graph.fingerprint()
        assert state.get_graph(public).fingerprint() == graph.fingerprint()
        assert state.has_plan(pk)
        assert plan_data.after_data(gk, pk).plan.order == plan.order  # memoised now
    with sessions.acting_as(B):
        with pytest.raises(GraphError, match="no longer in the cache"):
            state.get_graph(gk)
        with pytest.raises(PlanFormatError, match="no longer in the cache"):
            state.get_plan(pk)
        assert not state.has_plan(pk)
        with pytest.raises(GraphError):  # a memo hit does not bypass the check
            plan_data.after_data(gk, pk)
        assert state.get_graph(public).name == graph.name
        settings = {"method": "eager"}
        assert state.plan_key(gk, settings) != state.public_plan_key(gk, settings)
    with sessions.acting_as(A):
        assert state.plan_key(public, {"m": 1}) != state.public_plan_key(public, {"m": 1})


def test_json_records_are_filed_per_session(cache_dir: Path) -> None:
    state.put_json("snap-1", {"who": "server"})
    with sessions.acting_as(A):
        state.put_json("snap-1", {"who": "a"})
        assert state.get_json("snap-1") == {"who": "a"}
    with sessions.acting_as(B):
        assert state.get_json("snap-1") == {"who": "server"}  # the public one
        state.put_json("snap-2", {"who": "b"})
    with sessions.acting_as(A):
        assert state.get_json("snap-2") is None


def test_a_graph_without_ops_is_refused(cache_dir: Path) -> None:
    from roam_core.model.graph import Graph

    with pytest.raises(GraphError, match="no ops"):
        state.put_graph(Graph(ops=(), tensors={}, name="empty"))


def test_the_cookie_names_the_session() -> None:
    from flask import Flask

    server = Flask(__name__)
    sessions.install(server)
    seen: list[str] = []

    @server.route("/")
    def index() -> str:
        seen.append(sessions.current_owner())
        return "ok"

    client = server.test_client()
    r = client.get("/")
    cookie = r.headers["Set-Cookie"]
    assert sessions.COOKIE in cookie
    assert "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie
    client.get("/")
    assert len(seen) == 2
    assert seen[0] == seen[1] != sessions.PUBLIC
    assert "Set-Cookie" not in client.get("/").headers  # set once
    other = server.test_client()
    other.get("/")
    assert seen[-1] != seen[0]


def test_a_background_job_acts_for_the_session_of_its_request() -> None:
    token = context_value.set(AttributeDict(cookies={sessions.COOKIE: A}))
    try:
        assert sessions.current_owner() == A
        context_value.set(AttributeDict(cookies={}))  # no cookie: a session owning nothing
        owner = sessions.current_owner()
        assert owner not in (A, sessions.PUBLIC)
        context_value.set(AttributeDict(cookies={sessions.COOKIE: "../etc"}))
        assert sessions.current_owner() not in ("../etc", sessions.PUBLIC)
    finally:
        context_value.reset(token)
    assert sessions.current_owner() == sessions.PUBLIC


def test_tiny_graph_keys_are_stable_per_owner(cache_dir: Path) -> None:
    g = tiny_train_step()
    with sessions.acting_as(A):
        assert state.put_graph(g) == state.put_graph(g) == state.graph_key_of(g)
