"""Block moves scored from the current order's curve against a full re-count."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from roam_core.ordering.block_moves import BlockMoves
from roam_core.ordering.live_bytes import IndexLiveBytes
from tests.builders import random_train_graph
from tests.strategies import orders_of, random_graphs


def _score(live: np.ndarray) -> tuple[int, int]:
    peak = int(live.max())
    return peak, int(np.count_nonzero(live == peak))


def _moved(order: np.ndarray, steps: list[int], after: int) -> np.ndarray:
    """``order`` with the ops at ``steps`` put back, in their order, right after ``after``."""
    keep = [i for i in range(len(order)) if i not in set(steps)]
    cut = sum(1 for i in keep if i <= after)
    rest = order[keep]
    return np.concatenate([rest[:cut], order[steps], rest[cut:]])


def _check_all_moves(sc: IndexLiveBytes, order: np.ndarray, steps: list[int]) -> int:
    """Every place the ops at ``steps`` can go: the block score equals the full count (and
    ``None`` exactly when the order breaks an edge); the number of valid moves."""
    bm = BlockMoves(sc, order)
    valid = 0
    for after in range(-1, len(order)):
        if after in steps:
            continue
        cand = _moved(order, steps, after)
        got = bm.score_of(cand, np.asarray(steps), after)
        if sc.valid(cand):
            valid += 1
            assert got == _score(sc.live(cand)), (steps, after)
        else:
            assert got is None, (steps, after)
    return valid


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_block_move_scores_equal_a_full_count(data: st.DataObject) -> None:
    """Any set of steps moved to any place, on random graphs and orders."""
    g = data.draw(random_graphs(max_ops=10))
    sc = IndexLiveBytes.of(g, data.draw(st.sampled_from([1, 512])))
    order = np.asarray([sc.cg.index[o] for o in data.draw(orders_of(g))], dtype=np.int64)
    steps = sorted(data.draw(st.sets(st.integers(0, len(order) - 1), min_size=1,
                                     max_size=min(4, len(order)))))
    _check_all_moves(sc, order, steps)


def test_moves_of_a_training_step() -> None:
    """Runs of one to three ops of a training step moved everywhere: the moves that keep
    the order valid are scored exactly (and some are valid, so the check is not empty)."""
    g = random_train_graph(3, n_layers=4)
    sc = IndexLiveBytes.of(g, 512)
    order = np.arange(len(g.ops), dtype=np.int64)
    valid = sum(_check_all_moves(sc, order, list(range(i, i + k)))
                for k in (1, 2, 3) for i in range(0, len(order) - k + 1, 2))
    assert valid > len(order)
    # the state follows an accepted move: then moves of the new order are exact too
    cand = next(c for i in range(len(order)) for a in range(i + 2, len(order))
                if sc.valid(c := _moved(order, [i], a)))
    bm = BlockMoves(sc, order)
    bm.set_order(cand)
    assert (bm.live == sc.live(cand)).all()
    assert (cand != order).any()
    assert _check_all_moves(sc, cand, [2, 3]) > 0
