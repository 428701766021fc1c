"""Rows of the per-module table: bytes live at the peak per module, before and after."""

from __future__ import annotations

from typing import cast

from app.analysis.modules import module_label, natural_key
from roam_core.oracle.attribution import PeakAttribution

__all__ = ["MODULE_KINDS", "ModuleRow", "module_rows"]

#: One row of the per-module table (JSON for a ``DataTable``: labels, MiB, a share).
ModuleRow = dict[str, str | int | float | None]


#: Kind columns of the per-module table (the rest are summed into ``other``).
MODULE_KINDS: tuple[str, ...] = ("activation", "gradient", "parameter", "optimizer_state",
                                 "temporary", "communication")


def _grouped_kinds(attr: PeakAttribution, depth: int | None) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for m in attr.modules:
        key = m.module if depth is None else ".".join(m.module.split(".")[:depth])
        slot = out.setdefault(key, {})
        for k, b in m.bytes_by_kind.items():
            slot[k] = slot.get(k, 0) + b
    return out


def module_rows(after: PeakAttribution, before: PeakAttribution | None = None,
                depth: int | None = 1) -> list[ModuleRow]:
    """Rows of the per-module table: bytes live at the peak, per module, before and after.

    Parameters
    ----------
    after : PeakAttribution
        The shown order's peak by module (the plan; or the baseline when unplanned).
    before : PeakAttribution, optional
        The baseline order's peak by module.
    depth : int or None
        Group paths by their first ``depth`` components (``None``: every full path, each
        with its own bytes only).  Every grouping adds up to the peak.

    Returns
    -------
    list of dict
        ``id`` (the label), ``module``, ``depth``, ``after_mib``, ``before_mib``,
        ``change_mib``, ``share_pct`` and one ``<kind>_mib`` column per
        :data:`MODULE_KINDS` plus ``other_mib`` (the kinds of ``after``); largest first.
    """
    mib = float(2**20)
    ka = _grouped_kinds(after, depth)
    kb = _grouped_kinds(before, depth) if before is not None else {}
    total = after.total_bytes or 1
    rows = []
    for path in dict.fromkeys([*ka, *kb]):
        a = sum(ka.get(path, {}).values())
        b = sum(kb.get(path, {}).values()) if before is not None else None
        row: ModuleRow = {
            "id": module_label(path), "module": module_label(path),
            "depth": path.count(".") + 1 if path else 0,
            "after_mib": round(a / mib, 3),
            "before_mib": None if b is None else round(b / mib, 3),
            "change_mib": None if b is None else round((a - b) / mib, 3),
            "share_pct": round(100 * a / total, 1)}
        kinds = ka.get(path, {})
        for k in MODULE_KINDS:
            row[f"{k}_mib"] = round(kinds.get(k, 0) / mib, 3)
        row["other_mib"] = round(sum(v for k, v in kinds.items() if k not in MODULE_KINDS)
                                 / mib, 3)
        rows.append(row)
    rows.sort(key=lambda r: (-max(cast(float, r["after_mib"]),
                                  cast("float | None", r["before_mib"]) or 0),
                             natural_key(cast(str, r["module"]))))
    return rows
