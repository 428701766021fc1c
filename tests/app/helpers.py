"""Small builders shared by the app tests."""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Callable
from contextvars import copy_context
from typing import Any

import numpy as np
from dash._callback_context import context_value
from dash._utils import AttributeDict

from app.analysis.layout_view import LayoutView
from app.analysis.planner import run_planner
from app.analysis.settings import PlanSettings
from app.core import state
from roam_core.model.graph import Graph
from roam_core.model.plan import Plan
from roam_core.model.samples import tiny_train_step


def synthetic_view(n_rects: int, n_steps: int = 4000, seed: int = 0) -> LayoutView:
    """``n_rects`` random rectangles (not a valid layout: for rendering tests only)."""
    rng = np.random.default_rng(seed)
    start = rng.integers(0, n_steps - 1, n_rects)
    end = np.minimum(start + rng.integers(1, 200, n_rects), n_steps)
    size = rng.integers(1, 64, n_rects) * 512
    offset = rng.integers(0, 2**20, n_rects) * 512
    kind = rng.integers(0, 8, n_rects).astype(np.int8)
    ids = np.array([f"t{i}" for i in range(n_rects)], dtype=object)
    return LayoutView(ids, start, end, offset, size, kind, n_steps,
                      int((offset + size).max()), "synthetic")


def tree_for(plan: Plan) -> dict:
    """A two-level task tree over ``plan.order`` (halves), like the planner's summary."""
    n = len(plan.order)
    half = n // 2

    def node(nid: str, lo: int, hi: int, kids: list) -> dict:
        return {"id": nid, "kind": "leaf" if not kids else "split", "num_ops": hi - lo,
                "steps": [[lo, hi]], "peak_before_bytes": 4096, "peak_after_bytes": 3072,
                "status": "optimal", "objective_bytes": 3072, "best_bound_bytes": 3072,
                "gap": 0.0, "wall_time_s": 0.01, "num_cifi": 0, "num_cifo": 0,
                "num_cofi": 0, "children": kids}

    return node("root", 0, n, [node("t0", 0, half, []), node("t1", half, n, [])])


def planned_with_tree(graph: Graph | None = None) -> tuple[Graph, Plan]:
    """A valid stand-in plan for ``graph`` (tiny_train_step) carrying a task tree."""
    graph = graph or tiny_train_step()
    plan = run_planner(graph, PlanSettings(method="eager", time_limit_s=1.0))
    half = len(plan.order) // 2
    task_of_op = {o: ("t0" if i < half else "t1") for i, o in enumerate(plan.order)}
    return graph, dataclasses.replace(plan, task_tree=tree_for(plan), task_of_op=task_of_op)


def trace_values(values: object) -> np.ndarray:
    """A trace's ``x``/``y`` as an array, also when the figure was copied through
    ``to_dict()`` (plotly 6 then holds typed arrays as ``{"dtype", "bdata"}``)."""
    if isinstance(values, dict) and "bdata" in values:
        return np.frombuffer(base64.b64decode(values["bdata"]), dtype=values["dtype"])
    return np.asarray(values)


def run(fn: Callable[..., Any], trigger: str | dict, value: Any, *args: Any) -> Any:
    """Call a callback as Dash would after ``trigger`` changed to ``value``."""
    prop = (json.dumps(trigger, separators=(",", ":")) if isinstance(trigger, dict)
            else trigger) + ".data"

    def call() -> Any:
        context_value.set(AttributeDict(triggered_inputs=[{"prop_id": prop, "value": value}]))
        return fn(*args)

    return copy_context().run(call)


def data_url(raw: bytes) -> str:
    """What a ``dcc.Upload`` delivers for a small file of bytes ``raw`` (a config.json)."""
    return "data:application/octet-stream;base64," + base64.b64encode(raw).decode()


def uploaded(raw: bytes, filename: str = "file") -> dict[str, str | int]:
    """What an upload zone hands its store for a file of bytes ``raw`` (the bytes saved as
    the upload route saves them)."""
    import io

    from app.services.uploads import save_upload

    return {"token": save_upload(io.BytesIO(raw), 2**31), "filename": filename,
            "size": len(raw)}


def put_planned() -> tuple[str, str]:
    """:func:`planned_with_tree` stored in the app's cache: ``(graph key, plan key)``."""
    graph, plan = planned_with_tree()
    return state.put_graph(graph), state.put_plan(plan)


def open_lazy_card(page: Any, card_id: str, timeout_ms: int = 120_000) -> None:
    """Open the lazy card ``card_id`` in a Playwright ``page`` and wait for its body.

    One click: the body is mounted on the card's open state, whenever Dash learns it
    (``app.views.lazy``), so a click during the page's boot is not lost. The wait is long
    because the mount is a server round trip on a shared, loaded machine.
    """
    from playwright.sync_api import expect

    page.click(f"#{card_id}-open")
    expect(page.locator(f"#{card_id}-body > *").first).to_be_attached(timeout=timeout_ms)


def click_plot_until(page: Any, where_js: str, done: Callable[[int], None],
                     arg: Any = None, tries: int = 3, wait_ms: int = 20_000) -> list:
    """Click the page point that ``where_js`` computes until ``done(timeout_ms)`` passes.

    ``where_js`` is a JS function (of ``arg``) returning ``[x, y, ...]`` in page pixels.
    Plotly binds its click handler on each redraw: on a loaded machine a click can land
    between a redraw and the rebinding and is lost, so the point is recomputed (the figure
    may have moved) and clicked again. ``done`` raises ``AssertionError`` (or Playwright's
    timeout) while the effect is missing; the last try's failure is raised. Returns what
    ``where_js`` returned.
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    for attempt in range(tries):
        xy = page.evaluate(where_js, arg)
        page.mouse.move(xy[0], xy[1])
        page.mouse.click(xy[0], xy[1])
        try:
            done(wait_ms)
            return xy
        except (AssertionError, PlaywrightTimeout):
            if attempt == tries - 1:
                raise
    raise AssertionError("unreachable")


def click_until(page: Any, selector: str, done: Callable[[int], None], tries: int = 3,
                wait_ms: int = 20_000) -> None:
    """Click ``selector`` until ``done(timeout_ms)`` passes (see :func:`click_plot_until`).

    A list that a callback re-renders (search hits) can swap the element under a click that
    Playwright already aimed: the click lands on the outgoing node and is lost.
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    for attempt in range(tries):
        page.click(selector, timeout=wait_ms)
        try:
            done(wait_ms)
            return
        except (AssertionError, PlaywrightTimeout):
            if attempt == tries - 1:
                raise
