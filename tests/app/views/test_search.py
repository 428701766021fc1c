"""The Search card: regex or substring, modules, ops and storages."""

from __future__ import annotations

from app.views.search import model as search_model
from roam_core.model.samples import tiny_train_step


def test_search_regex_and_plain_fallback() -> None:
    g = tiny_train_step()
    assert [h[1] for h in search_model.search(g, "^relu$")] == ["relu", "relu"]
    assert [h[0] for h in search_model.search(g, "aten.sub_")] == ["op"]
    assert search_model.search(g, "relu_bw(") == []  # invalid regex: plain substring, no match
    assert search_model.search(g, "  ") == []
    assert len(search_model.search(g, ".", limit=3)) == 3


def test_an_invalid_regex_says_so() -> None:
    """"no match" alone read as if the graph had nothing: an invalid expression is named."""
    from app.views.search import view as search_view

    assert search_model.regex_problem("relu_bw(").startswith("missing )")
    text = str(search_view.search_children([], search_model.regex_problem("relu_bw(")))
    assert "not a valid regular expression (missing )" in text
    assert "no match" in text
