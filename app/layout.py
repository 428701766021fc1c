"""Component construction only: the page, the collapsible task tree, the summary card.

No callbacks and no roam_core computations here (the defaults come in as arguments).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dash import dash_table, dcc, html

from app import ids
from app.analysis import MODULE_KINDS, Section, fmt_bytes, shown_children
from app.planning import BASELINE_METHODS, PLAN_METHODS, PlanSettings

__all__ = ["build_layout", "explain_children", "module_card", "search_children",
           "summary_children", "tree_children", "verify_children"]

_GRAPH_CFG = {"displaylogo": False, "scrollZoom": False,
              "modeBarButtonsToRemove": ["lasso2d", "select2d"]}


def _card(title: str, *children: Any, id_: str | None = None, cls: str = "") -> html.Div:
    kw = {"id": id_} if id_ else {}
    return html.Div([html.H3(title), *children], className=f"card {cls}".strip(), **kw)


def _num(id_: str, label: str, value: float, step: float = 1, min_: float = 0) -> html.Label:
    return html.Label([label, dcc.Input(id=id_, type="number", value=value, step=step,
                                        min=min_, debounce=True)], className="field")


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
        html.Div([_num(ids.TIME_LIMIT, "time limit (s)", s.time_limit_s, step=0.5),
                  _num(ids.NODE_LIMIT, "node limit", s.node_limit, min_=1),
                  _num(ids.WORKERS, "workers", s.workers, min_=1),
                  _num(ids.ALIGNMENT, "alignment (B)", s.alignment_bytes, min_=1)],
                 className="grid2"),
        html.Div([html.Button("Plan", id=ids.PLAN_BTN, className="primary"),
                  html.Button("Cancel", id=ids.CANCEL_BTN, disabled=True)],
                 className="buttons"),
        html.Progress(id=ids.PROGRESS, value="0", max="1"),
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
                 html.Div([html.Button("Verify", id=ids.VERIFY_BTN, disabled=True),
                           html.Button("Cancel", id=ids.VERIFY_CANCEL_BTN, disabled=True)],
                          className="buttons"),
                 html.Div(id=ids.VERIFY_STATUS, className="status"),
                 html.Div(id=ids.VERIFY_RESULT),
                 id_=ids.VERIFY_CARD)


def _graph(id_: str, height: int) -> dcc.Graph:
    return dcc.Graph(id=id_, config=_GRAPH_CFG, style={"height": f"{height}px"})


def build_layout(defaults: Mapping[str, Any]) -> html.Div:
    """The whole page; ``defaults`` seeds the stores (graph and plan keys, settings...)."""
    s: PlanSettings = defaults["settings"]
    stores = [dcc.Store(id=ids.GRAPH_KEY, data=defaults.get("graph_key")),
              dcc.Store(id=ids.PLAN_KEY, data=defaults.get("plan_key")),
              dcc.Store(id=ids.VIEW_RANGE, data=None), dcc.Store(id=ids.SELECTION, data=None),
              dcc.Store(id=ids.STEP, data=None), dcc.Store(id=ids.TRACE_RESULT, data=None),
              dcc.Store(id=ids.PLAN_RESULT, data=None),
              dcc.Store(id=ids.IMPORT_RESULT, data=None),
              dcc.Store(id=ids.VERIFY_DONE, data=None), dcc.Store(id=ids.TREE_OPEN, data={})]
    side = html.Div([_loading_card(defaults), _plan_card(s),
                     _card("Search", dcc.Input(id=ids.SEARCH_INPUT, type="search",
                                               placeholder="op or tensor name (regex)",
                                               debounce=True),
                           html.Div(id=ids.SEARCH_RESULTS, className="hits")),
                     _export_card(), _verify_card()],
                    className="side")
    main = html.Div([
        html.Div(id=ids.SUMMARY, className="card summary"),
        html.Div([html.Span(id=ids.RANGE_TEXT),
                  html.Button("Reset zoom", id=ids.RESET_ZOOM)], className="rangebar"),
        _card("Memory: before vs after", _graph(ids.CURVES, 380)),
        _card("Operator timeline", _graph(ids.TIMELINE, 230)),
        _card("Tensor layout (x: lifetime steps, y: byte offset)", _graph(ids.LAYOUT, 460),
              _graph(ids.BASE_LAYOUT, 460)),
        html.Div([_card("Task division", html.Div(id=ids.TREE, className="tree")),
                  _card("Explain", html.Div(id=ids.EXPLAIN, className="explain"))],
                 className="row2"),
        _card("Live tensors", html.Div(id=ids.LIVE_TITLE, className="muted"),
              dash_table.DataTable(
                  id=ids.LIVE_TABLE, page_size=15, sort_action="native",
                  columns=[{"name": c, "id": c} for c in
                           ("id", "name", "module", "kind", "size", "offset", "lifetime",
                            "producer")],
                  style_cell={"fontFamily": "monospace", "fontSize": 12},
                  style_table={"overflowX": "auto"})),
        module_card(),
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
                 _graph(ids.MODULE_ICICLE, 420), id_="module-card")


def _tree_node(node: Mapping[str, Any], depth: int,
               shown: Mapping[str, int]) -> html.Details | html.Div:
    gap, nid = node.get("gap"), str(node.get("id"))
    label = (f"{nid} · {node.get('kind', '')} · {node.get('num_ops', 0)} ops · "
             f"peak {fmt_bytes(node.get('peak_before_bytes'))} → "
             f"{fmt_bytes(node.get('peak_after_bytes'))} · {node.get('status', '?')}"
             + (f" · gap {100 * float(gap):.1f} %" if gap is not None else ""))
    btn = html.Button(label, id={"type": ids.TREE_NODE, "index": nid},
                      className="node", title="zoom every view to this sub-task's steps")
    kids = node.get("children") or ()
    n_shown = shown_children(node, depth, shown)
    more = [html.Button(f"+ {len(kids) - n_shown} more sub-tasks",
                        id={"type": ids.TREE_MORE, "index": nid}, className="more",
                        title="show more of this sub-task's children")
            ] if n_shown < len(kids) else []
    if not n_shown:
        return html.Div([btn, *more], className="leaf")
    return html.Details([html.Summary(btn),
                         *[_tree_node(c, depth + 1, shown) for c in kids[:n_shown]], *more],
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
    return _tree_node(tree, 0, shown or {})


def summary_children(rows: Sequence[tuple[str, str]]) -> list[Any]:
    """The summary card body."""
    return [html.H3("Summary"),
            html.Table([html.Tr([html.Td(k), html.Td(v)]) for k, v in rows])]


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


def verify_children(passed: bool | None, rows: Sequence[tuple[str, str]]) -> list[Any]:
    """The Verify result: a pass/fail badge and the report table (a hint when empty)."""
    if passed is None:
        return [html.Div("not verified yet: press Verify", className="muted")]
    badge = html.Div("PASS" if passed else "FAIL", className="verify-badge",
                     style={"fontWeight": "bold", "margin": "6px 0",
                            "color": "#2a7a2a" if passed else "#c44e52"})
    return [badge, html.Table([html.Tr([html.Td(k), html.Td(v)]) for k, v in rows],
                              className="verify-table", style={"fontSize": "12px"})]
