"""The hint check's down-set search decides as the plain scan of every op did, at every
work limit: the same answer (``False``, ``True`` or undecided ``None``), so the planner
skips CP-SAT on exactly the same sub-tasks."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from roam_core.model.graph import Graph
from roam_core.ordering.config import OrderSolverConfig
from roam_core.ordering.order_hint_check import range_beats
from roam_core.ordering.order_problem import RangeProblem, build_order_problem, range_profile
from tests.builders import random_train_graph, random_valid_order
from tests.strategies import random_graphs

CONFIG = OrderSolverConfig(stop_at_lower_bound=False)
LIMITS = (0, 40, 300, 2_000, 20_000, 1_000_000)


def scan_range_beats(rng: RangeProblem, below: int, max_work: int) -> bool | None:
    """The check as first written: every op looked at for every down-set, every term
    summed for every down-set's live bytes (the reference)."""
    n = len(rng.ops)
    if n == 0:
        return rng.const_bytes < below
    pred_mask = [0] * n
    for i, ps in enumerate(rng.preds):
        for q in ps:
            pred_mask[i] |= 1 << q
    terms = [(t.size_bytes, 0 if t.producer is None else 1 << t.producer,
              sum(1 << u for u in t.users), t.live_after) for t in rng.terms]
    made_by = [0] * n
    for t in rng.terms:
        if t.producer is not None:
            made_by[t.producer] += t.size_bytes

    def live_after_ops(done: int) -> int:
        total = rng.const_bytes
        for size, prod, users, after in terms:
            if prod and not done & prod:
                continue
            if after or users & ~done or (not users and not prod and done == 0):
                total += size
        return total

    frontier, work, per_step = {0}, 0, len(terms) + 1
    for _ in range(n):
        nxt: set[int] = set()
        for done in frontier:
            for v in range(n):
                if done >> v & 1 or pred_mask[v] & ~done:
                    continue
                d2 = done | (1 << v)
                if d2 in nxt:
                    continue
                work += per_step
                if work > max_work:
                    return None
                if live_after_ops(done) + made_by[v] < below:
                    nxt.add(d2)
        if not nxt:
            return False
        frontier = nxt
    return (1 << n) - 1 in frontier


def _ranges(graph: Graph, seed: int, width: int) -> list[RangeProblem]:
    base = random_valid_order(graph, seed)
    out = []
    for a in range(0, len(base), width):
        ops = list(base[a:a + width])
        if len(ops) > 1:
            out += build_order_problem(graph, base, ops, config=CONFIG,
                                       alignment_bytes=512).ranges
    return out


def _work(check: Callable[[RangeProblem, int, int], bool | None], rng: RangeProblem,
          below: int) -> int:
    """The least work limit at which ``check`` decides (the work the whole search counts:
    below it, the answer is ``None``)."""
    lo, hi = 0, 1 << 24
    assert check(rng, below, hi) is not None
    while lo < hi:
        mid = (lo + hi) // 2
        if check(rng, below, mid) is None:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _check(rng: RangeProblem) -> set[bool | None]:
    """Both checks at several thresholds and limits: the answers seen.  The work each
    search counts in all is the same too, so every limit decides alike."""
    hint = max(range_profile(rng, range(len(rng.ops))))
    seen: set[bool | None] = set()
    for below in (hint - 512, hint, hint + 1, 2 * hint + 1):
        for limit in LIMITS:
            got = range_beats(rng, below, limit)
            assert got == scan_range_beats(rng, below, limit), (below, limit)
            seen.add(got)
        assert _work(range_beats, rng, below) == _work(scan_range_beats, rng, below)
    return seen


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_graphs(max_ops=12), st.integers(0, 1000), st.integers(2, 12))
def test_same_answers_as_the_scan_on_random_ranges(graph: Graph, seed: int,
                                                   width: int) -> None:
    for rng in _ranges(graph, seed, width):
        _check(rng)


def test_same_answers_on_training_steps() -> None:
    """Wider ranges of random training steps, where the limits cut some searches: every
    answer (undecided included) is the scan's, and all three occur."""
    seen: set[bool | None] = set()
    for seed in range(4):
        for rng in _ranges(random_train_graph(seed, 6), seed, 24):
            seen |= _check(rng)
    assert seen == {False, True, None}
