"""Layout baselines: valid on random problems and on graphs, at least the lower bound."""

from __future__ import annotations

import pytest
from hypothesis import given

from roam_core.base.errors import ConfigError
from roam_core.layout.baseline_layouts import LAYOUT_METHODS, baseline_layout
from roam_core.layout.inductor_pool import inductor_pool
from roam_core.layout.llfb import llfb
from roam_core.model.dsa import Buffer, Problem
from roam_core.model.samples import diamond, tiny_train_step
from roam_core.oracle.simulate import simulate
from roam_core.oracle.validate import check_arena, check_dsa_solution
from tests.strategies import problems


@pytest.mark.parametrize("method", sorted(LAYOUT_METHODS))
@given(p=problems(max_buffers=10))
def test_valid_on_random_problems(method: str, p: Problem) -> None:
    sol = LAYOUT_METHODS[method](p)
    assert check_dsa_solution(p, sol) == []
    assert sol.height >= p.lower_bound()


@pytest.mark.parametrize("method", sorted(LAYOUT_METHODS))
def test_valid_on_graphs(method: str) -> None:
    for g in (diamond(), tiny_train_step()):
        lay = baseline_layout(g, g.op_ids, method)
        assert check_arena(g, g.op_ids, lay.offsets, lay.arena_bytes, 512) == []
        assert lay.arena_bytes >= simulate(g).peak_bytes
        assert lay.method == method


def test_unknown_method() -> None:
    with pytest.raises(ConfigError, match="unknown layout method"):
        baseline_layout(diamond(), diamond().op_ids, "nope")


def test_llfb_puts_the_longest_lived_at_the_bottom() -> None:
    p = Problem((Buffer("short", 0, 2, 4), Buffer("long", 0, 10, 1), Buffer("mid", 3, 8, 2)))
    sol = llfb(p)
    assert sol.offsets[1] == 0
    assert sol.height == 5


def test_inductor_reuses_a_freed_slot() -> None:
    # b and c never live together: the pool tree puts c in b's slot
    p = Problem((Buffer("a", 0, 4, 8), Buffer("b", 0, 2, 4), Buffer("c", 2, 4, 4)))
    sol = inductor_pool(p)
    assert sol.height == 12
    assert sol.offsets[1] == sol.offsets[2]
