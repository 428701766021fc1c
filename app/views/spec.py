"""What a view is to the page: the components it adds, its stores, its callbacks.

Every view module defines one :class:`View` named ``VIEW``; :mod:`app.views.registry` lists
them and :mod:`app.views.page` builds the page and registers the callbacks from that list.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from app.analysis.settings import PlanSettings
from app.core.config import AppConfig
from app.core.store_types import GraphRef

if TYPE_CHECKING:
    from dash import Dash, dcc
    from dash.development.base_component import Component

__all__ = ["Column", "PageDefaults", "View"]

#: The page's two columns: controls on the left, the views of the plan on the right.
Column = Literal["side", "main"]


@dataclass(frozen=True, slots=True)
class PageDefaults:
    """What a fresh page starts with (one page load; built by :func:`app.create_app`)."""

    settings: PlanSettings  # the plan-settings form
    sample_options: Sequence[dict[str, str]]  # the sample-graph dropdown
    sample_value: str | None  # the sample opened, if any
    graph: GraphRef  # the graph opened
    plan_key: str | None  # its plan, when planned at start-up
    max_upload_bytes: int
    zoo_models: Sequence[str]  # zoo names (empty without torch)
    load_message: str = ""


def _no_stores() -> Sequence[dcc.Store]:
    return ()


@dataclass(frozen=True, slots=True)
class View:
    """One view of the page.

    Parameters
    ----------
    name : str
        Short name (``"timeline"``), unique on the page.
    column : {"side", "main"}
        The column its components go in (in registry order).
    components : callable
        ``components(defaults)``: the view's cards (built on every page load).
    register : callable
        ``register(app, config)``: adds the view's callbacks to the Dash app.
    stores : callable
        ``stores()``: the view's own ``dcc.Store`` components (put with the page's stores).
    row : str, optional
        Consecutive views of one ``row`` share a two-column row of the page.
    warm : callable, optional
        ``warm(graph_key, plan_key)``: compute (and memoise) what the view shows first, so
        that the first page load finds it ready.
    """

    name: str
    column: Column
    components: Callable[[PageDefaults], Sequence[Component]]
    register: Callable[[Dash, AppConfig], None]
    stores: Callable[[], Sequence[dcc.Store]] = _no_stores
    row: str | None = None
    warm: Callable[[str, str | None], None] | None = None
