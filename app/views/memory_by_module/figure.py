"""The bytes live at the peak as an icicle by module (pure: bytes by module in, figure out)."""

from __future__ import annotations

from collections.abc import Mapping

import plotly.graph_objects as go

from app.analysis.modules import TOP_LEVEL, module_label, natural_key
from app.core.formatting import fmt_bytes, kind_label
from app.figures.style import BASE_LAYOUT, KIND_COLORS, empty_figure

__all__ = ["module_icicle_figure"]


# ------------------------------------------------------------------ memory by module
def module_icicle_figure(
    after: Mapping[str, Mapping[str, int]], before: Mapping[str, Mapping[str, int]] | None = None,
    *, title: str | None = None, selected: str | None = None, max_depth: int = 4,
) -> go.Figure:
    """Bytes live at the peak as an icicle by module (area = bytes, colour = main kind).

    Parameters
    ----------
    after, before : Mapping of full module path to (kind -> bytes)
        Own bytes of each module at the shown peak (and at the baseline's); ``""`` is the
        top level.  Each node's value is its subtree's bytes, so the root is the peak.
    title : str, optional
    selected : str, optional
        A module path drawn with a black outline.
    max_depth : int
        Levels drawn at once.

    The node id of a module is its path (:data:`~app.analysis.modules.TOP_LEVEL` for
    ``""``; the root is ``"all"``), so a click names the module (in the app a click selects
    it and does not zoom: ``assets/module_icicle.js``).
    """
    def totals(own: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for path, kinds in own.items():
            parts = path.split(".") if path else [""]
            for i in range(1, len(parts) + 1):
                slot = out.setdefault(".".join(parts[:i]), {})
                for k, b in kinds.items():
                    slot[k] = slot.get(k, 0) + b
        return out

    sub = totals(after)
    sub_before = totals(before) if before is not None else {}
    peak = sum(sum(k.values()) for k in after.values())
    if not peak:
        return empty_figure("no bytes live at the peak")
    ids, parents, values, colors, lines = ["all"], [""], [peak], ["#eeeeee"], [1]
    text = [f"{fmt_bytes(peak)} at the peak"]
    for path in sorted(sub, key=lambda p: (p.count("."), natural_key(p))):
        kinds = sub[path]
        total = sum(kinds.values())
        if not total:
            continue
        parent = path.rpartition(".")[0] if "." in path else "all"
        ids.append(module_label(path))
        parents.append(module_label(parent) if parent != "all" else "all")
        values.append(total)
        main = max(kinds, key=lambda k: kinds[k])
        colors.append(KIND_COLORS.get(main, "#8c8c8c"))
        was = sum(sub_before.get(path, {}).values()) if before is not None else None
        parts = [f"{fmt_bytes(total)} at the peak ({100 * total / peak:.1f} %)"]
        if was is not None:
            parts.append(f"before: {fmt_bytes(was)}")
        parts += [f"{k.replace('_', ' ')}: {fmt_bytes(b)}" for k, b in
                  sorted(kinds.items(), key=lambda kv: -kv[1]) if b]
        text.append("<br>".join(parts))
        lines.append(3 if selected is not None and path == selected else 1)
    fig = go.Figure(go.Icicle(
        ids=ids, labels=[i.rpartition(".")[2] if i not in ("all", TOP_LEVEL) else i
                         for i in ids],
        parents=parents, values=values, branchvalues="total", text=text,
        marker={"colors": colors, "line": {"width": lines, "color": "#000"}},
        maxdepth=max_depth, sort=False, tiling={"orientation": "v"},
        hovertemplate="<b>%{id}</b><br>%{text}<extra></extra>", textinfo="label"),
        layout=BASE_LAYOUT)
    shown = {k for kinds in after.values() for k, b in kinds.items() if b}
    key = "  ".join(f'<span style="color:{c}">■</span> {kind_label(k)}'
                    for k, c in KIND_COLORS.items() if k in shown)
    head = title or f"bytes at the peak by module: {fmt_bytes(peak)}"
    fig.update_layout(height=440, margin={"l": 10, "r": 10, "t": 56, "b": 10},
                      title={"text": f"{head}<br><sup>colour: the largest kind · {key}</sup>",
                             "font": {"size": 13}, "x": 0.01, "y": 0.97},
                      uirevision="modules")
    return fig
