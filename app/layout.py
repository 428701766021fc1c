"""Component construction only: the page, the collapsible task tree, the summary card.

No callbacks and no roam_core computations here (the defaults come in as arguments).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from dash import dash_table, dcc, html

from app import extra_views, ids, lazy
from app.analysis import MODULE_KINDS, Section, fmt_bytes, node_role, ring_span, shown_children
from app.planning import BASELINE_METHODS, PLAN_METHODS, PlanSettings

__all__ = ["HOW_TO_READ", "build_layout", "explain_children", "how_to_read", "module_card",
           "search_children", "summary_children", "tree_children", "verify_children",
           "verify_label_text",
           "walkthrough_children"]

_GRAPH_CFG = {"displaylogo": False, "scrollZoom": False,
              "modeBarButtonsToRemove": ["lasso2d", "select2d"]}


#: "How to read this", one or two lines per view (collapsed under the view's title).
HOW_TO_READ: dict[str, str] = {
    "summary": "The peak is the most memory live at once: it decides what fits on the GPU. "
               "'before' is the order you compare with; 'planned' is roam's. The lower bound "
               "is a floor no order can beat.",
    "curves": "Bytes live at every step of the training step, before (blue) and after "
              "planning (red). Only the highest point matters; the labels at each peak name "
              "the largest tensors live there. Click a step to list what is live.",
    "timeline": "One cell per operator, coloured by phase (forward, loss, backward, "
                "optimizer), in the compared order (top) and the planned order (bottom). "
                "Click an op to see what pins it in place.",
    "layout": "Every tensor is a rectangle: x is when it is alive, y where it sits in memory. "
              "The planned arena (top) packs them with no gaps that matter; the caching "
              "allocator (bottom) leaves holes. Hover anywhere on a rectangle; click it to "
              "ask why it sits there.",
    "tree": "roam splits the step into sub-tasks small enough to solve exactly and orders "
            "each one. Green '▼ peak fell' marks sub-tasks whose own peak fell: that is "
            "where the saving came from. Click a node to zoom every view to its steps.",
    "explain": "Why the selected op or tensor is where it is: what it depends on, how its "
               "lifetime changed and what is live with it at the peak.",
    "live": "The tensors live at the selected step (the planned peak by default), largest "
            "first. Hover a size or offset for the exact bytes.",
}


def how_to_read(view: str) -> html.Details:
    """The collapsible "How to read this" note of one view (closed by default)."""
    return html.Details([html.Summary("How to read this"),
                         html.Div(HOW_TO_READ[view], className="muted")],
                        className="howto", id=f"howto-{view}")


def _card(title: str, *children: Any, id_: str | None = None, cls: str = "") -> html.Div:
    kw = {"id": id_} if id_ else {}
    return html.Div([html.H3(title), *children], className=f"card {cls}".strip(), **kw)


def _num(id_: str, label: str, value: float, step: float | str = 1,
         min_: float | None = 0) -> html.Label:
    kw = {} if min_ is None else {"min": min_}  # no min: a bad value reaches the check
    return html.Label([label, dcc.Input(id=id_, type="number", value=value, step=step,
                                        debounce=True, **kw)], className="field")


def _loading_card(defaults: Mapping[str, Any]) -> html.Div:
    zoo = list(defaults.get("zoo_models") or [])
    return _card(
        "Graph",
        dcc.Dropdown(id=ids.SAMPLE_PICK, options=defaults["sample_options"],
                     value=defaults.get("sample_value"), clearable=False,
                     placeholder="pick a sample graph"),
        dcc.Upload(id=ids.UPLOAD, className="upload", children=html.Div([
            f"Drop a graph (.json / .json.gz, ≤ {defaults['max_upload_bytes'] // 2**20} MiB) or ",
            html.A("browse")])),
        html.Div(defaults.get("load_message", ""), id=ids.LOAD_STATUS, className="status"),
        html.Details([
            html.Summary("Trace a zoo model"),
            dcc.Dropdown(id=ids.ZOO_MODEL, options=zoo, value=zoo[0] if zoo else None,
                         placeholder="no zoo (torch missing)" if not zoo else None),
            _num(ids.ZOO_BATCH, "batch", 1, min_=1),
            _num(ids.ZOO_SEQ, "sequence length (0 = default)", 0),
            html.Label(["optimizer", dcc.Dropdown(id=ids.ZOO_OPTIMIZER, clearable=False,
                                                  options=["adamw", "adam", "sgd"],
                                                  value="adamw")], className="field"),
            html.Label(["setting", dcc.Dropdown(id=ids.ZOO_SETTING, clearable=False,
                                                options=["steady", "roam"],
                                                value="steady")], className="field"),
            html.Div([html.Button("Trace", id=ids.ZOO_TRACE_BTN, disabled=not zoo),
                      html.Button("Cancel", id=ids.ZOO_CANCEL_BTN, disabled=True)],
                     className="buttons"),
            html.Div(id=ids.ZOO_PROGRESS, className="status"),
            html.Div(id=ids.ZOO_STATUS, className="status"),
        ], className="zoo"),
    )


def _plan_card(s: PlanSettings) -> html.Div:
    return _card(
        "Plan",
        html.Label(["method", dcc.Dropdown(id=ids.METHOD, clearable=False, value=s.method,
                                           options=[{"label": lbl, "value": v}
                                                    for v, lbl in PLAN_METHODS])],
                   className="field"),
        html.Label(["compare with (before)", dcc.Dropdown(
            id=ids.BASELINE, clearable=False, value="eager",
            options=[{"label": lbl, "value": v} for v, lbl in BASELINE_METHODS])],
            className="field"),
        html.Div([_num(ids.TIME_LIMIT, "time limit (s)", s.time_limit_s, step="any",
                       min_=None),
                  _num(ids.NODE_LIMIT, "node limit", s.node_limit, min_=None),
                  _num(ids.WORKERS, "workers", s.workers, min_=None),
                  _num(ids.ALIGNMENT, "alignment (B)", s.alignment_bytes, min_=None)],
                 className="grid2"),
        html.Div(id=ids.SETTINGS_MSG, className="status error"),
        html.Div([html.Button("Plan", id=ids.PLAN_BTN, className="primary"),
                  html.Button("Cancel", id=ids.CANCEL_BTN, disabled=True)],
                 className="buttons"),
        html.Progress(id=ids.PROGRESS, value="0", max="1000"),
        html.Div(id=ids.PROGRESS_TEXT, className="status"),
        html.Div(id=ids.PLAN_STATUS, className="status"),
    )


def _export_card() -> html.Div:
    return _card(
        "Export / import",
        html.Div([html.Button("Plan JSON", id=ids.EXPORT_JSON),
                  html.Button("MiniMalloc CSV", id=ids.EXPORT_CSV),
                  html.Button("HTML report", id=ids.EXPORT_HTML)], className="buttons"),
        html.Div([dcc.Dropdown(id=ids.PNG_FIGURE, clearable=False, value="curves",
                               options=["curves", "timeline", "layout", "base_layout",
                                        "tree", "modules"]),
                  html.Button("PNG", id=ids.EXPORT_PNG)], className="buttons png"),
        dcc.Download(id=ids.DOWNLOAD),
        html.Div(id=ids.EXPORT_STATUS, className="status"),
        dcc.Upload(id=ids.PLAN_UPLOAD, children=html.Div(["Import a plan JSON: drop or ",
                                                          html.A("browse")]),
                   className="upload"),
        html.Div(id=ids.IMPORT_STATUS, className="status"),
    )


def _verify_card() -> html.Div:
    """"Verify on GPU/CPU": run the plan for real (options are filled by a callback)."""
    return _card("Verify on GPU/CPU",
                 html.Div("Runs the training step eagerly and as the plan's one-arena "
                          "replay, and compares them.", className="muted"),
                 dcc.RadioItems(id=ids.VERIFY_DEVICE, options=[], value=None, inline=True),
                 html.Div(id=ids.VERIFY_NOTE, className="muted"),
                 html.Div([html.Button(verify_label_text(None), id=ids.VERIFY_BTN,
                                       disabled=True),
                           html.Button("Cancel", id=ids.VERIFY_CANCEL_BTN, disabled=True)],
                          className="buttons"),
                 html.Div(id=ids.VERIFY_STATUS, className="status"),
                 html.Div(verify_children(None, []), id=ids.VERIFY_RESULT),
                 id_=ids.VERIFY_CARD)


def _blank_figure(note: str = "") -> dict[str, Any]:
    """What a graph shows before its first render: no axes (plotly's default empty figure
    draws a -1..6 grid that looks like a broken chart), and ``note`` if given."""
    hidden = {"visible": False}
    notes = [{"text": note, "showarrow": False, "xref": "paper", "yref": "paper", "x": 0.5,
              "y": 0.5, "font": {"color": "#888"}}] if note else []
    return {"data": [], "layout": {"xaxis": hidden, "yaxis": hidden, "annotations": notes,
                                   "paper_bgcolor": "rgba(0,0,0,0)",
                                   "plot_bgcolor": "rgba(0,0,0,0)"}}


def _graph(id_: str, height: int, note: str = "") -> html.Div:
    # the wrapper holds the height while plotly.js loads: the page does not jump, and the
    # cards below the fold stay below it (they are mounted when scrolled into view)
    return html.Div(dcc.Graph(id=id_, config=_GRAPH_CFG, style={"height": f"{height}px"},
                              figure=_blank_figure(note)),
                    style={"minHeight": f"{height}px"})


def build_layout(defaults: Mapping[str, Any]) -> html.Div:
    """The whole page; ``defaults`` seeds the stores (graph and plan keys, settings...)."""
    s: PlanSettings = defaults["settings"]
    st = lazy.store
    stores = [st(ids.GRAPH_KEY, defaults.get("graph_key")),
              st(ids.PLAN_KEY, defaults.get("plan_key")),
              st(ids.VIEW_RANGE), st(ids.SELECTION), st(ids.STEP), st(ids.TRACE_RESULT),
              st(ids.PLAN_RESULT), st(ids.IMPORT_RESULT), st(ids.VERIFY_DONE),
              st(ids.TREE_OPEN, {}),
              st(ids.RUNNING, {"plan": False, "trace": False, "verify": False}),
              st(ids.SESSION, uuid.uuid4().hex), st(ids.VERIFY_OFF, True),
              st(ids.MODULE_SEEN)]
    side = html.Div([_loading_card(defaults), _plan_card(s),
                     _card("Search", dcc.Input(id=ids.SEARCH_INPUT, type="search",
                                               placeholder="op or tensor name (regex)",
                                               debounce=True),
                           html.Div(id=ids.SEARCH_RESULTS, className="hits")),
                     _export_card(), _verify_card()],
                    className="side")
    main = html.Div([
        html.Div(id=ids.SUMMARY, className="card summary"),
        html.Div(id=ids.TOUR),
        html.Div([html.Span(id=ids.RANGE_TEXT),
                  html.Button("Reset zoom", id=ids.RESET_ZOOM)], className="rangebar"),
        _card("Memory: before vs after", how_to_read("curves"), _graph(ids.CURVES, 380)),
        _card("Operator timeline", how_to_read("timeline"), _graph(ids.TIMELINE, 230)),
        _card("Tensor layout (x: lifetime steps, y: byte offset)", how_to_read("layout"),
              _graph(ids.LAYOUT, 460), _graph(ids.BASE_LAYOUT, 460)),
        html.Div([_card("Task division", how_to_read("tree"),
                        html.Div(id=ids.TREE, className="tree")),
                  _card("Explain", how_to_read("explain"),
                        html.Div(id=ids.EXPLAIN, className="explain"))],
                 className="row2"),
        _card("Live tensors", how_to_read("live"), html.Div(id=ids.LIVE_TITLE, className="muted"),
              dash_table.DataTable(
                  id=ids.LIVE_TABLE, page_size=15, sort_action="native",
                  columns=[{"name": c, "id": c} for c in
                           ("id", "name", "module", "kind", "size", "offset", "lifetime",
                            "producer")],
                  style_cell={"fontFamily": "monospace", "fontSize": 12},
                  tooltip_delay=300, tooltip_duration=None,
                  style_table={"overflowX": "auto"})),
        module_card(),
        *extra_views.cards(defaults),
    ], className="main")
    header = html.Header([html.H1("roam"),
                          html.Span("memory-efficient execution plans for a training step",
                                    className="muted")])
    return html.Div([*stores, header, html.Div([side, main], className="page")])


def module_card() -> html.Div:
    """Memory by module: a sortable table and an icicle of the bytes live at the peak."""
    mib = {"type": "numeric", "format": {"specifier": ",.3f"}}
    cols = [{"name": "module", "id": "module"},
            {"name": "before (MiB)", "id": "before_mib", **mib},
            {"name": "after (MiB)", "id": "after_mib", **mib},
            {"name": "change (MiB)", "id": "change_mib", **mib},
            {"name": "share %", "id": "share_pct", "type": "numeric"}]
    cols += [{"name": f"{k} (MiB)", "id": f"{k}_mib", **mib}
             for k in (*MODULE_KINDS, "other")]
    controls = html.Div([
        html.Label(["group by", dcc.Dropdown(
            id=ids.MODULE_DEPTH, clearable=False, value=2,
            options=[{"label": f"depth {d}", "value": d} for d in (1, 2, 3, 4)]
            + [{"label": "full paths (own bytes)", "value": "full"}])], className="field"),
        html.Label(["kinds and icicle of", dcc.RadioItems(
            id=ids.MODULE_SIDE, value="after", inline=True,
            options=[{"label": "the plan", "value": "after"},
                     {"label": "the baseline", "value": "before"}])], className="field"),
    ], className="grid2")
    table = dash_table.DataTable(
        id=ids.MODULE_TABLE, page_size=15, sort_action="native", columns=cols,
        sort_by=[{"column_id": "after_mib", "direction": "desc"}],
        style_cell={"fontFamily": "monospace", "fontSize": 12},
        style_cell_conditional=[{"if": {"column_id": "module"}, "textAlign": "left"}],
        style_table={"overflowX": "auto"})
    return _card("Memory by module (bytes live at the peak)",
                 html.Div(id=ids.MODULE_TITLE, className="muted"), controls, table,
                 _graph(ids.MODULE_ICICLE, 440, "drawn when this card is scrolled into view"),
                 id_=ids.MODULE_CARD)


def _tree_node(node: Mapping[str, Any], depth: int,
               shown: Mapping[str, int], rings: tuple[int, int] | None = None
               ) -> html.Details | html.Div:
    gap, nid = node.get("gap"), str(node.get("id"))
    fell = _peak_fell(node)
    label = (f"{nid} · {node.get('kind', '')} · {node.get('num_ops', 0)} ops · "
             f"peak {fmt_bytes(node.get('peak_before_bytes'))} → "
             f"{fmt_bytes(node.get('peak_after_bytes'))} · {node.get('status', '?')}"
             + (f" · gap {100 * float(gap):.1f} %" if gap is not None else ""))
    role = node_role(node, rings=rings) if rings is not None else node_role(node)
    # one string, not spans: the lazy tree stays a few components per node
    btn = html.Button(f"{label} — {role}" + (" ▼ peak fell" if fell else ""),
                      id={"type": ids.TREE_NODE, "index": nid},
                      className="node" + (" fell" if fell else ""),
                      title=f"{role}. Click: zoom every view to this sub-task's steps"
                            + (" (its peak fell: part of the saving)" if fell else ""))
    kids = node.get("children") or ()
    n_shown = shown_children(node, depth, shown)
    more = [html.Button(f"+ {len(kids) - n_shown} more sub-tasks",
                        id={"type": ids.TREE_MORE, "index": nid}, className="more",
                        title="show more of this sub-task's children")
            ] if n_shown < len(kids) else []
    if not n_shown:
        return html.Div([btn, *more], className="leaf")
    return html.Details([html.Summary(btn),
                         *[_tree_node(c, depth + 1, shown, rings) for c in kids[:n_shown]],
                         *more],
                        open=True)


def tree_children(tree: Mapping[str, Any] | None, shown: Mapping[str, int] | None = None
                  ) -> Any:
    """The collapsible task tree, mounted lazily (or a note when the plan has none).

    Only the children counted by :func:`app.analysis.shown_children` are mounted; the rest
    of each node is one "+ N more sub-tasks" button (``{"type": TREE_MORE, "index": id}``),
    so a plan with hundreds of sub-tasks still mounts a few dozen components.
    """
    if not tree:
        return html.Div("No task tree: this plan comes from a baseline method (or is not "
                        "planned yet).", className="muted")
    return _tree_node(tree, 0, shown or {}, ring_span(tree))


def _peak_fell(node: Mapping[str, Any]) -> bool:
    before, after = node.get("peak_before_bytes"), node.get("peak_after_bytes")
    return before is not None and after is not None and after < before


def walkthrough_children(open_: bool, steps: Sequence[tuple[str, str, Sequence[tuple[str, str]]]]
                         ) -> list[Any]:
    """The guided walkthrough card: numbered steps, each with clickable tensors."""
    if not steps:
        return []
    items = [html.Li([html.Div(text), html.Div(  # "step" keeps ids unique across steps
        [html.Button(label, id={"type": ids.TOUR_HIT, "index": f"tensor:{tid}", "step": i},
                     className="hit") for tid, label in links], className="tour-links")])
        for i, (_, text, links) in enumerate(steps)]
    return [html.Details([html.Summary("Guided walkthrough: what the planner did, step by "
                                       "step"), html.Ol(items, className="tour")],
                         open=open_, className="card walkthrough")]


def summary_children(rows: Sequence[tuple[str, str]]) -> list[Any]:
    """The summary card body (rows labelled "why" are the plan's own explanations)."""
    table = [r for r in rows if r[0] != "why"]
    why = [v for k, v in rows if k == "why"]
    return [html.H3("Summary"), how_to_read("summary"),
            html.Table([html.Tr([html.Td(k), html.Td(v)]) for k, v in table]),
            *([html.Ul([html.Li(w) for w in why], className="why")] if why else [])]


def explain_children(sections: Sequence[Section]) -> list[Any]:
    """The Explain panel body."""
    return [html.Div([html.H4(s.title), html.Ul([html.Li(x) for x in s.lines])])
            for s in sections]


def search_children(hits: Sequence[tuple[str, str, str]]) -> list[Any]:
    """Search hits as buttons (click: select, highlight and zoom)."""
    if not hits:
        return [html.Div("no match", className="muted")]
    return [html.Button(label, id={"type": ids.SEARCH_HIT, "index": f"{kind}:{ident}"},
                        className="hit") for kind, ident, label in hits]


def verify_label_text(device: str | None) -> str:
    """The Verify button says where it runs."""
    return f"Verify on {'GPU' if device == 'cuda' else 'CPU'}"


def verify_children(passed: bool | None, rows: Sequence[tuple[str, str]]) -> list[Any]:
    """The Verify result: a pass/fail badge and the report table (a hint when empty)."""
    if passed is None:
        return [html.Div("not verified yet: press Verify", className="muted")]
    badge = html.Div("PASS" if passed else "FAIL", className="verify-badge",
                     style={"fontWeight": "bold", "margin": "6px 0",
                            "color": "#2a7a2a" if passed else "#c44e52"})
    return [badge, html.Table([html.Tr([html.Td(k), html.Td(v)]) for k, v in rows],
                              className="verify-table", style={"fontSize": "12px"})]
