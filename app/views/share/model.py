"""The page's state in its address (``?graph=…&plan=…&x0=…&x1=…&sel=kind:id``) and back.

Pure: no Dash, no cache.  :func:`encode` writes the query string the page keeps in its
address bar; :func:`decode` reads one back, dropping any part that is malformed (a link
edited by hand opens what it still names, never something else).
"""

from __future__ import annotations

import math
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["SELECTION_KINDS", "UrlState", "decode", "encode"]

#: The kinds of thing a selection names (``app.core.store_types.Selection``).
SELECTION_KINDS = ("op", "tensor", "module")


@dataclass(frozen=True, slots=True)
class UrlState:
    """What a link names; ``None`` where it names nothing (or something malformed)."""

    graph_key: str | None = None
    plan_key: str | None = None
    view_range: tuple[float, float] | None = None  # the step window [x0, x1]
    selection: tuple[str, str] | None = None  # (kind, id)


def encode(graph_key: str | None, plan_key: str | None,
           view_range: Sequence[float] | None, selection: Mapping[str, str] | None) -> str:
    """The query string (with its ``?``; empty when there is nothing to say).

    >>> encode("g-1", "p-2", [3.5, 40], {"kind": "op", "id": "mm_1"})
    '?graph=g-1&plan=p-2&x0=3.5&x1=40&sel=op%3Amm_1'
    >>> encode(None, None, None, None)
    ''
    """
    parts: list[tuple[str, str]] = []
    if graph_key:
        parts.append(("graph", graph_key))
    if plan_key:
        parts.append(("plan", plan_key))
    if view_range is not None and len(view_range) == 2:
        parts += [("x0", f"{float(view_range[0]):g}"), ("x1", f"{float(view_range[1]):g}")]
    if selection and selection.get("kind") in SELECTION_KINDS:
        parts.append(("sel", f"{selection['kind']}:{selection.get('id', '')}"))
    return "?" + urllib.parse.urlencode(parts) if parts else ""


def _number(text: str | None) -> float | None:
    try:
        x = float(text) if text is not None else math.nan
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def decode(query: str | Mapping[str, str]) -> UrlState:
    """What a query string (``"?graph=…"`` or parsed arguments) names.

    >>> decode("?graph=g-1&x0=9&x1=3&sel=op:mm_1")
    UrlState(graph_key='g-1', plan_key=None, view_range=(3.0, 9.0), selection=('op', 'mm_1'))
    >>> decode("?x0=nan&x1=2&sel=car:x")
    UrlState(graph_key=None, plan_key=None, view_range=None, selection=None)
    """
    if isinstance(query, str):
        args = dict(urllib.parse.parse_qsl(query.lstrip("?"), keep_blank_values=True))
    else:
        args = dict(query)
    x0, x1 = _number(args.get("x0")), _number(args.get("x1"))
    rng = (min(x0, x1), max(x0, x1)) if x0 is not None and x1 is not None and x0 != x1 else None
    kind, _, ident = args.get("sel", "").partition(":")
    sel = (kind, ident) if kind in SELECTION_KINDS and (ident or kind == "module") else None
    return UrlState(args.get("graph") or None, args.get("plan") or None, rng, sel)
