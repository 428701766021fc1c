"""A candidate portfolio for one budget: the greedy prefix beside other drop sets.

The greedy trajectory (:mod:`roam_core.recompute.greedy`) gives nested prefixes of one drop
sequence, and its ratio rule takes one storage at a time: the storage with the most bytes at
the peak per unit of recompute cost.  Some drop sets only pay off as a group -- GPT-2's
residual stream (each ``add`` is rebuilt from the one before), the dropout outputs and masks
re-drawn from the replayed RNG state beside it -- where no single member lowers the peak on
its own, so the greedy drops a large, FLOP-costly attention score matrix (a ``bmm``) instead.
torch's min-cut partitioner finds such groups.

:func:`swap_improve` is a bounded local search on one drop set that fits: keep one of the
costliest dropped storages again and drop cheaper ones live at the new peak instead (a
batch covering the overshoot, doubled while it does not lower the peak), keeping the swap
when the set still fits and costs less.

:func:`best_of` takes labelled candidate drop sets (the greedy prefix first, then e.g. the
module-structure baselines and torch's min-cut decisions), keeps those whose
just-in-time peak fits the limit, prunes each
(:func:`~roam_core.recompute.greedy.prune`: re-admit what the limit does not need, costliest
first), improves the first (roam's own) by swaps, and sorts them by the planner's
objective (FLOPs + ``bytes_weight`` x bytes moved);
the caller keeps the cheapest one whose planned arena fits.  All candidates are scored by
the same :class:`~roam_core.recompute.evaluator.JitEvaluator`; the work per budget is one
evaluation per candidate, one prune per candidate that fits and at most ``max_evals``
evaluations of swaps.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from roam_core.model.graph import TensorId
from roam_core.recompute.evaluator import Evaluation, JitEvaluator
from roam_core.recompute.greedy import prune

__all__ = ["Candidate", "best_of", "fewest_flops", "swap_improve"]


@dataclass(frozen=True, slots=True)
class Candidate:
    """One candidate drop set of the portfolio, after pruning and swaps.

    Parameters
    ----------
    label : str
        Where it started (``"roam"``: the greedy prefix; a baseline or seed name).
    evaluation : Evaluation
        Its just-in-time evaluation (peak, recompute ops, order, cost).
    cost : float
        FLOPs + ``bytes_weight`` x bytes moved.
    fits : bool
        Whether its just-in-time peak fits the limit (``False``: listed as a last resort,
        the planner's own order may still fit it).
    """

    label: str
    evaluation: Evaluation
    cost: float
    fits: bool = True


def _fits(e: Evaluation, limit: int) -> bool:
    return e.peak_bytes <= limit


def _better(a: Evaluation, b: Evaluation) -> bool:
    return (a.peak_bytes, a.peak_steps) < (b.peak_bytes, b.peak_steps)


def swap_improve(evaluator: JitEvaluator, start: Evaluation, limit_bytes: int,
                 bytes_weight: float = 1.0, *, max_swaps: int = 8,
                 max_evals: int = 64) -> Evaluation:
    """Swap costly drops for cheaper ones while the drop set keeps fitting ``limit_bytes``.

    For each of the ``max_swaps`` dropped storages whose own re-run costs most, the storage
    is kept again and cheaper droppable storages live at the new peak step are dropped
    instead, best bytes-per-cost first, in a batch that covers the overshoot (doubled when
    it does not lower the peak: cheap drops often only help together), until the peak is
    back under the limit; then what the limit does not need is kept again.  The swap is
    taken when the result fits and costs less.

    Parameters
    ----------
    evaluator : JitEvaluator
        The evaluator of the graph and base order.
    start : Evaluation
        A drop set that fits (returned unchanged when it does not).
    limit_bytes : int
        The just-in-time peak to stay at or under.
    bytes_weight : float
        Cost of one byte moved, in FLOPs.
    max_swaps : int
        Costliest drops tried.
    max_evals : int
        Evaluations in all (each is ``O(n)``).

    Returns
    -------
    Evaluation
        A drop set that fits and costs at most ``start``'s.
    """
    if start.peak_bytes > limit_bytes or not start.dropped:
        return start
    ev, w = evaluator, bytes_weight
    own = {s: ev.producer_cost(s, w) for s in ev.droppable if ev.size[s]}
    pool = sorted(own, key=lambda s: (-ev.size[s] / (own[s] + 1.0), s))
    cur = start
    costly = sorted((s for s in cur.dropped if own.get(s, 0) > 0),
                    key=lambda s: (-own[s], s))[:max_swaps]
    evals = 0
    for x in costly:
        if evals >= max_evals or x not in cur.dropped:
            continue
        trial = [d for d in cur.dropped if d != x]
        e = ev.evaluate(trial)
        evals += 1
        added: list[TensorId] = []
        scale = 1
        while e.peak_bytes > limit_bytes and evals < max_evals:
            assert e.live is not None
            p = int(np.argmax(e.live))
            dset = set(trial)
            spans: Mapping[TensorId, tuple[int, int]] = e.spans or {}
            need = scale * (e.peak_bytes - limit_bytes)
            batch: list[TensorId] = []
            got = 0
            for s in pool:
                if s in dset or s == x or own[s] >= own[x]:
                    continue
                a, b = spans.get(s, (0, 0))
                if a <= p < b:
                    batch.append(s)
                    got += ev.size[s]
                    if got >= need:
                        break
            if not batch:
                break
            nxt = ev.evaluate([*trial, *batch])
            evals += 1
            if _better(nxt, e):
                trial.extend(batch)
                added.extend(batch)
                e, scale = nxt, 1
            elif got < need:
                break  # every candidate at this step is in the batch
            else:
                scale *= 2
        if e.peak_bytes > limit_bytes:
            continue
        for s in sorted(added, key=lambda s: (-own[s], s)):
            if evals >= max_evals:
                break
            t2 = [d for d in trial if d != s]
            e2 = ev.evaluate(t2)
            evals += 1
            if e2.peak_bytes <= limit_bytes and e2.cost(w) <= e.cost(w):
                trial, e = t2, e2
        if e.cost(w) < cur.cost(w):
            cur = e
    return cur


def best_of(evaluator: JitEvaluator, limit_bytes: int,
            candidates: Iterable[tuple[str, Sequence[TensorId]]],
            bytes_weight: float = 1.0, *, swaps: int = 8,
            max_evals: int = 64, keep_unfit: bool = False) -> list[Candidate]:
    """Every candidate drop set that fits ``limit_bytes``, pruned, cheapest first.

    Parameters
    ----------
    evaluator : JitEvaluator
        The evaluator of the graph and base order.
    limit_bytes : int
        The just-in-time peak to reach.
    candidates : iterable of (str, sequence of TensorId)
        Labelled drop sets (the greedy prefix first; ties keep the earlier one).  A set
        whose evaluation does not fit is left out; storages the graph cannot drop are
        removed first.
    bytes_weight : float
        Cost of one byte moved, in FLOPs.
    swaps, max_evals : int
        Bounds of the :func:`swap_improve` pass run on the first candidate (roam's own
        greedy prefix); 0 swaps: none.
    keep_unfit : bool
        Also list the candidates whose just-in-time peak is over the limit, as given, after
        all that fit (``fits=False``).

    Returns
    -------
    list of Candidate
        Sorted by cost (then input order); duplicates (same drop set) appear once.  A
        candidate other than the first is listed both pruned and as given; the first both
        pruned and, when swaps made it cheaper, swapped (label ``"<label>+swap"``).
    """
    ok = set(evaluator.droppable) | {  # as the baselines: a storage no late op reads is
        t for t, rs in evaluator.readers.items()  # rebuilt by re-runs instead of kept for them
        if evaluator.graph.tensors[t].producer is not None
        and not any(r in evaluator.late for r in rs)}
    out: list[Candidate] = []
    unfit: list[Candidate] = []
    seen: set[frozenset[TensorId]] = set()
    for i, (label, drops) in enumerate(candidates):
        d = [s for s in dict.fromkeys(drops) if s in ok]
        key = frozenset(d)
        if key in seen:
            continue
        seen.add(key)
        e = evaluator.evaluate(d)
        if not _fits(e, limit_bytes):
            if keep_unfit:  # the first too: with no greedy prefix that fits, it is a baseline's
                unfit.append(Candidate(label, e, e.cost(bytes_weight), fits=False))
            continue
        raw = e
        e = prune(evaluator, e.dropped, limit_bytes, bytes_weight)
        if i > 0 and frozenset(e.dropped) != frozenset(raw.dropped):
            # the set as given stays a fallback: the planner may find the pruned set's
            # arena over the budget (layout), and the given set is the baseline's own plan
            out.append(Candidate(label, raw, raw.cost(bytes_weight)))
        if i == 0 and swaps:
            sw = swap_improve(evaluator, e, limit_bytes, bytes_weight, max_swaps=swaps,
                              max_evals=max_evals)
            if sw is not e:  # the pruned prefix stays a fallback (its layout may fit)
                out.append(Candidate(f"{label}+swap", sw, sw.cost(bytes_weight)))
        out.append(Candidate(label, e, e.cost(bytes_weight)))
    order = {id(c): i for i, c in enumerate(out + unfit)}
    out.sort(key=lambda c: (c.cost, order[id(c)]))
    out += sorted(unfit, key=lambda c: (c.cost, order[id(c)]))
    uniq: list[Candidate] = []
    kept: set[frozenset[TensorId]] = set()
    for c in out:
        k = frozenset(c.evaluation.dropped)
        if k not in kept:
            kept.add(k)
            uniq.append(c)
    return uniq


def fewest_flops(evaluator: JitEvaluator, limit_bytes: int, candidates: Sequence[Candidate],
                 below_flops: int, bytes_weight: float = 1.0, *, tries: int = 2
                 ) -> list[Candidate]:
    """The candidates that fit with fewer extra FLOPs than ``below_flops``, fewest first,
    each also pruned by FLOPs alone.

    The portfolio keeps the cheapest candidate by FLOPs + ``bytes_weight`` x bytes moved; a
    candidate that moves more bytes for fewer FLOPs (torch's min-cut sets re-run elementwise
    ops broadly) is then another point of the (peak, FLOPs) frontier.  For each of the
    ``tries`` candidates with the fewest FLOPs (ties: the lower objective), its drop set is
    pruned with ``bytes_weight`` 0 (:func:`~roam_core.recompute.greedy.prune`: what keeps the
    just-in-time peak at or under ``max(limit_bytes, its peak)`` at no more FLOPs is kept
    again, so fewer bytes move) and listed before the set as given (the caller plans them in
    turn and keeps the first whose arena fits).

    Parameters
    ----------
    evaluator : JitEvaluator
        The evaluator the candidates were scored with.
    limit_bytes : int
        The just-in-time peak the pruned sets stay at or under.
    candidates : sequence of Candidate
        The portfolio at this budget (:func:`best_of`).
    below_flops : int
        The extra FLOPs of the plan the objective picked.
    bytes_weight : float
        The objective's weight of a byte moved (for :attr:`Candidate.cost`).
    tries : int
        Candidates taken.

    Returns
    -------
    list of Candidate
        Labelled ``"<label>, fewest FLOPs"``; pruned before unpruned, fewest FLOPs first.
    """
    few = sorted((c for c in candidates if c.fits and c.evaluation.extra_flops < below_flops),
                 key=lambda c: (c.evaluation.extra_flops, c.cost))[:tries]
    out: list[Candidate] = []
    seen: set[frozenset[TensorId]] = set()
    for c in few:
        e = prune(evaluator, c.evaluation.dropped, limit_bytes, 0.0)
        for x in (e, c.evaluation):
            k = frozenset(x.dropped)
            if k not in seen and x.extra_flops < below_flops:
                seen.add(k)
                out.append(Candidate(f"{c.label}, fewest FLOPs", x, x.cost(bytes_weight)))
    return out
