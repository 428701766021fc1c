"""Memoised figures sent as their JSON text: made once, shared whole."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.core import memo
from app.views.curves import data as curves_data
from app.views.layouts import data as layouts_data
from app.views.memory_by_module import data as modules_data
from app.views.timeline import data as timeline_data


@pytest.mark.slow
def test_frozen_figures_are_made_once_and_shared_whole(planned: dict[str, Any]) -> None:
    """The page is sent a figure's memoised JSON text (parsed into the caller's own dict):
    many threads asking at once get equal, complete dicts, made from one serialisation."""
    from concurrent.futures import ThreadPoolExecutor


    g, pk = planned["graph"]["key"], planned["plan"]
    memo.clear_caches()
    with ThreadPoolExecutor(8) as ex:
        dicts = list(ex.map(lambda _: timeline_data.timeline_dict(g, pk, "eager", None, None),
                            range(16)))
    assert dicts[0]["data"]
    assert all(d == dicts[0] for d in dicts[1:])
    assert dicts[0] is not dicts[1]
    dicts[0]["layout"]["title"] = "mutated"  # a caller's dict is its own
    assert timeline_data.timeline_dict(g, pk, "eager", None, None)["layout"].get("title") != \
        "mutated"
    want = json.loads(timeline_data.timeline_fig(g, pk, "eager", None, None).to_json())
    assert dicts[1] == want  # the same figure as the copy path
    lay, base = layouts_data.layout_dicts(g, pk, "eager", None, None)
    assert lay["layout"]["meta"]["lod"]
    assert base["data"]
    assert curves_data.curves_dict(g, pk, "eager", None, None)["data"]
    rows, ice, title = modules_data.module_view_dict(g, pk, "eager", 2, "after")
    rows2, ice2, title2 = modules_data.module_view(g, pk, "eager", 2, "after")
    assert (rows, title) == (rows2, title2)
    assert ice == json.loads(ice2.to_json())

    made = []

    def freeze(v: list[int]) -> tuple[int, ...]:
        made.append(1)
        return tuple(v)

    @memo.memoised(2, copy=list, frozen=freeze)
    def stored(n: int) -> list[int]:
        return [n]

    with ThreadPoolExecutor(8) as ex:
        forms = list(ex.map(lambda _: stored.frozen(1), range(16)))
    assert len(made) == 1
    assert all(f is forms[0] for f in forms)
    with pytest.raises(ValueError):
        memo.memoised(2, frozen=tuple)
