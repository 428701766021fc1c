"""Two plans of one graph side by side, and their difference (pure: plans in, rows out).

Plans A and B may have different numbers of steps (a plan that re-runs ops has more), so
every lifetime here is counted in each plan's own steps, and a storage's *held steps* add
its original lifetime and the lifetimes of its recomputed copies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

from app.analysis.modules import module_label, tensor_module_label
from app.analysis.peaks import tensor_label
from app.core.formatting import fmt_bytes
from roam_core.model.graph import Graph, TensorId, round_size
from roam_core.model.plan import Plan
from roam_core.oracle.attribution import PeakAttribution
from roam_core.oracle.simulate import lifetimes

__all__ = ["LIFETIME_COLUMNS", "METRIC_COLUMNS", "MODULE_COLUMNS", "Columns", "Held", "Row",
           "held_steps", "lifetime_rows", "metric_rows", "module_diff_rows", "signed_bytes"]

#: One row of a comparison table (JSON for a ``DataTable``).
Row = dict[str, str | int | float | None]
#: A table's ``(heading, row key)`` columns, in order (the card and the exported report).
Columns = tuple[tuple[str, str], ...]

METRIC_COLUMNS: Columns = (("metric", "metric"), ("plan A", "a"), ("plan B", "b"),
                           ("B − A", "diff"))
MODULE_COLUMNS: Columns = (("module", "module"), ("A (MiB)", "a_mib"), ("B (MiB)", "b_mib"),
                           ("B − A (MiB)", "diff_mib"))
LIFETIME_COLUMNS: Columns = (("tensor", "tensor"), ("module", "module"), ("op", "op"),
                             ("source", "source"), ("size", "size"), ("A steps", "a_steps"),
                             ("B steps", "b_steps"), ("re-run in", "rerun"),
                             ("B − A (MiB × steps)", "diff_mib_steps"))


@dataclass(frozen=True, slots=True)
class Held:
    """How long a plan holds one storage of the input graph.

    ``steps``: its original lifetime plus those of its recomputed copies, in the plan's own
    steps; ``rerun``: the plan drops it and re-runs its producer to rebuild it.
    """

    steps: int
    rerun: bool


def signed_bytes(n: float) -> str:
    """A difference in bytes with its sign (``+1.00 MiB``, ``−512 B``, ``0 B``).

    >>> signed_bytes(2**20), signed_bytes(-512), signed_bytes(0)
    ('+1.00 MiB', '−512 B', '0 B')
    """
    if n == 0:
        return "0 B"
    return ("+" if n > 0 else "−") + fmt_bytes(abs(n))


def _pct(d: float, base: float) -> str:
    return f" ({'+' if d > 0 else '−'}{abs(100 * d / base):.1f} %)" if base and d else ""


def metric_rows(a: Plan, b: Plan, step_seconds: float) -> list[Row]:
    """The small table: planned peak, arena, extra time (ms and % of the step) and re-runs
    of plans ``a`` and ``b``, and the difference ``b - a``.

    ``step_seconds`` is the step without recomputation on the cost model's device profile
    (used where a plan carries none: plans without recomputation).  Extra times priced on
    two different device profiles get no difference (it would compare two devices).
    """
    apart = bool(a.device_profile and b.device_profile
                 and a.device_profile != b.device_profile)

    def extra_pct(p: Plan) -> float:
        base = p.step_seconds or step_seconds
        return 100 * p.extra_seconds / base if base else 0.0

    rows: list[Row] = []
    for name, va, vb in (("planned peak", a.planned_peak_bytes, b.planned_peak_bytes),
                         ("arena", a.arena_bytes, b.arena_bytes)):
        rows.append({"metric": name, "a": fmt_bytes(va), "b": fmt_bytes(vb),
                     "diff": signed_bytes(vb - va) + _pct(vb - va, va)})
    ea, eb = 1e3 * a.extra_seconds, 1e3 * b.extra_seconds
    other = "n/a: other device profiles"
    rows.append({"metric": "extra time (ms)", "a": f"{ea:.3f}", "b": f"{eb:.3f}",
                 "diff": other if apart else f"{eb - ea:+.3f}"})
    pa, pb = extra_pct(a), extra_pct(b)
    rows.append({"metric": "extra time (% of step)", "a": f"{pa:.2f}", "b": f"{pb:.2f}",
                 "diff": other if apart else f"{pb - pa:+.2f}"})
    ra, rb = len(a.recompute), len(b.recompute)
    rows.append({"metric": "re-runs (ops)", "a": str(ra), "b": str(rb), "diff": f"{rb - ra:+d}"})
    return rows


def module_diff_rows(a: PeakAttribution, b: PeakAttribution) -> list[Row]:
    """Bytes live at each plan's own peak by module (full paths, each with its own bytes),
    both columns and ``b - a`` in MiB, largest ``|b - a|`` first (then by name)."""
    mib = float(2**20)
    own_a, own_b = a.own_bytes(), b.own_bytes()
    rows: list[Row] = []
    for path in dict.fromkeys([*own_a, *own_b]):
        va, vb = own_a.get(path, 0), own_b.get(path, 0)
        rows.append({"module": module_label(path), "a_mib": round(va / mib, 3),
                     "b_mib": round(vb / mib, 3), "diff_mib": round((vb - va) / mib, 3),
                     "_diff": vb - va})
    rows.sort(key=lambda r: (-abs(cast(int, r["_diff"])), cast(str, r["module"])))
    for r in rows:
        del r["_diff"]
    return rows


def held_steps(graph: Graph, plan: Plan, view: Graph) -> dict[TensorId, Held]:
    """How long ``plan`` holds each produced storage of ``graph`` (the input graph).

    ``view`` is the graph the plan's order runs over: ``graph`` expanded with the plan's
    re-runs (:func:`app.services.view_graph.view_graph`), which gives every recomputed
    copy a storage of its own.
    """
    life = lifetimes(view, plan.order)
    copies: dict[TensorId, list[TensorId]] = {}
    for r in plan.recompute:
        src = graph.op(r.source)
        for orig, new in zip(src.outputs, r.outputs, strict=False):
            if orig in graph.tensors and new in view.tensors:
                copies.setdefault(TensorId(orig), []).append(TensorId(new))
    out: dict[TensorId, Held] = {}
    for tid, t in graph.tensors.items():
        lt = life.get(tid)
        if t.producer is None or lt is None:
            continue
        steps = lt.end - lt.start + sum(life[c].end - life[c].start
                                        for c in copies.get(tid, ()) if c in life)
        out[tid] = Held(steps, tid in copies)
    return out


def _producer(graph: Graph, tid: TensorId) -> tuple[str, str]:
    """``(op target, source line)`` of the op that made ``tid``."""
    t = graph.tensors[tid]
    if t.producer is None:
        return "", ""
    op = graph.op(t.producer)
    return op.target, op.source


def lifetime_rows(graph: Graph, held_a: Mapping[TensorId, Held],
                  held_b: Mapping[TensorId, Held], alignment_bytes: int = 512,
                  limit: int = 12) -> list[Row]:
    """The storages whose held steps (or re-run status) differ most between two plans.

    Parameters
    ----------
    graph : Graph
        The input graph (names, modules, producers and sizes come from it).
    held_a, held_b : Mapping
        :func:`held_steps` of plans A and B.
    alignment_bytes : int
        Rounding of sizes for the bytes × steps change.
    limit : int
        Rows kept.

    Returns
    -------
    list of dict
        ``tensor`` (its name or what made it), ``module`` (module path), ``op`` (its
        producer's target), ``source`` (the producer's user-code line, ``""`` when not
        recorded), ``id``, ``size``, ``a_steps``, ``b_steps``, ``diff_steps``, ``a_rerun``,
        ``b_rerun`` (``"re-run"`` or ``""``), ``rerun`` (which plans re-run it: ``"A"``,
        ``"B"``, ``"A and B"`` or ``""``) and ``diff_mib_steps`` (``b - a`` in MiB × steps);
        largest ``|diff_mib_steps|`` first, a changed re-run status first among equals.
    """
    mib = float(2**20)
    found: list[tuple[int, bool, TensorId, Held, Held]] = []
    for tid in dict.fromkeys([*held_a, *held_b]):
        ha, hb = held_a.get(tid, Held(0, False)), held_b.get(tid, Held(0, False))
        if ha == hb:
            continue
        size = round_size(graph.tensors[tid].size_bytes, alignment_bytes)
        found.append((size * (hb.steps - ha.steps), ha.rerun != hb.rerun, tid, ha, hb))
    found.sort(key=lambda f: (-abs(f[0]), not f[1], f[2]))
    rows: list[Row] = []
    for d, _, tid, ha, hb in found[:limit]:
        target, source = _producer(graph, tid)
        rows.append({"tensor": tensor_label(graph, tid),
                     "module": tensor_module_label(graph, graph.tensors[tid]),
                     "op": target, "source": source, "id": tid,
                     "size": fmt_bytes(graph.tensors[tid].size_bytes),
                     "a_steps": ha.steps, "b_steps": hb.steps,
                     "diff_steps": hb.steps - ha.steps,
                     "a_rerun": "re-run" if ha.rerun else "",
                     "b_rerun": "re-run" if hb.rerun else "",
                     "rerun": " and ".join(x for x, h in (("A", ha), ("B", hb)) if h.rerun),
                     "diff_mib_steps": round(d / mib, 3)})
    return rows
