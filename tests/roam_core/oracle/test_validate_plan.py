"""Layout validators: one test per violation kind (minimalloc validator_test style), the sweep
against a quadratic reference, and speed on 10k tensors."""

from __future__ import annotations

import dataclasses
import random

from hypothesis import given
from hypothesis import strategies as st

from roam_core.base.errors import ViolationKind as K
from roam_core.model.dsa import Buffer, Problem, Solution
from roam_core.model.samples import tiny_train_step
from roam_core.oracle.validate import check_arena, check_dsa_solution, check_plan
from roam_core.oracle.validate.arena_rules import _overlapping_pairs
from tests.builders import eager_greedy_plan as _plan


def _kinds(vs: list) -> set[K]:  # type: ignore[type-arg]
    return {v.kind for v in vs}


class TestCheckArena:
    g = tiny_train_step()

    def _check(self, offsets: dict[str, int], arena: int | None = None) -> set[K]:
        plan = _plan(self.g)
        return _kinds(check_arena(self.g, self.g.op_ids, offsets,
                                  plan.arena_bytes if arena is None else arena, 512))

    def test_valid_plan_passes(self) -> None:
        plan = _plan(self.g)
        assert check_plan(self.g, plan) == []

    def test_missing_offset(self) -> None:
        offs = dict(_plan(self.g).offsets)
        del offs["relu"]
        assert K.MISSING_OFFSET in self._check(offs)

    def test_unknown_tensor(self) -> None:
        offs = {**_plan(self.g).offsets, "ghost": 0}
        assert self._check(offs) == {K.UNKNOWN_TENSOR}

    def test_negative_offset(self) -> None:
        offs = {**_plan(self.g).offsets, "loss": -512}
        assert K.NEGATIVE_OFFSET in self._check(offs)

    def test_misaligned(self) -> None:
        plan = _plan(self.g)
        offs = {**plan.offsets, "loss": plan.arena_bytes + 8}
        assert K.MISALIGNED in self._check(offs, plan.arena_bytes + 8 + 512)

    def test_out_of_arena(self) -> None:
        plan = _plan(self.g)
        assert K.OUT_OF_ARENA in self._check(dict(plan.offsets), plan.arena_bytes - 512)

    def test_overlap_of_co_live_tensors(self) -> None:
        offs = dict(_plan(self.g).offsets)
        offs["relu"] = offs["mm"]  # relu reads mm: live together
        assert K.OVERLAP in self._check(offs)

    def test_resident_is_live_always(self) -> None:
        offs = dict(_plan(self.g).offsets)
        offs["grad_w"] = offs["w"]  # the parameter is live for the whole step
        vs = check_arena(self.g, self.g.op_ids, offs, _plan(self.g).arena_bytes, 512)
        assert any(v.kind is K.OVERLAP and "'w'" in v.message for v in vs)

    def test_wrong_height(self) -> None:
        plan = _plan(self.g)
        assert self._check(dict(plan.offsets), plan.arena_bytes + 512) == {K.WRONG_HEIGHT}

    def test_not_co_live_may_share(self) -> None:
        # mm dies after relu runs; grad_w is created later: sharing bytes is fine
        plan = _plan(self.g)
        offs = dict(plan.offsets)
        offs["grad_w"] = offs["mm"]
        vs = check_arena(self.g, self.g.op_ids, offs, max(
            offs[t] + 512 for t in offs), 512)
        assert not any(v.kind is K.OVERLAP and "grad_w" in v.message and "'mm'" in v.message
                       for v in vs)


class TestCheckPlan:
    g = tiny_train_step()

    def test_fingerprint(self) -> None:
        plan = dataclasses.replace(_plan(self.g), graph_fingerprint="0" * 64)
        vs = check_plan(self.g, plan)
        assert [v.kind for v in vs] == [K.FINGERPRINT]
        assert "000000000000" in vs[0].message

    def test_order_violations_are_included(self) -> None:
        plan = _plan(self.g)
        bad = dataclasses.replace(plan, order=(plan.order[1], plan.order[0], *plan.order[2:]))
        assert K.PRECEDENCE in _kinds(check_plan(self.g, bad))

    def test_every_violation_is_reported(self) -> None:
        plan = _plan(self.g)
        offs = {**plan.offsets, "ghost": 1, "loss": -1}
        del offs["relu"]
        bad = dataclasses.replace(plan, offsets=offs, graph_fingerprint="f" * 64)
        assert {K.FINGERPRINT, K.UNKNOWN_TENSOR, K.NEGATIVE_OFFSET, K.MISSING_OFFSET} <= \
            _kinds(check_plan(self.g, bad))


class TestCheckDsaSolution:
    p = Problem((Buffer("a", 0, 2, 4), Buffer("b", 1, 3, 4), Buffer("c", 2, 4, 4)), 8)

    def test_validates_stairs(self) -> None:
        assert check_dsa_solution(self.p, Solution((0, 4, 0), 8)) == []

    def test_validates_tetris(self) -> None:
        p = Problem((Buffer("a", 0, 10, 2), Buffer("b", 0, 5, 2), Buffer("c", 5, 10, 2)), 4)
        assert check_dsa_solution(p, Solution((0, 2, 2), 4)) == []

    def test_missing_offsets(self) -> None:
        assert _kinds(check_dsa_solution(self.p, Solution((0, 4), 8))) == {K.MISSING_OFFSET}

    def test_negative_offset(self) -> None:
        assert K.NEGATIVE_OFFSET in _kinds(check_dsa_solution(self.p, Solution((0, 4, -1), 8)))

    def test_misaligned(self) -> None:
        p = Problem((Buffer("a", 0, 1, 4, 4),))
        assert _kinds(check_dsa_solution(p, Solution((2,), 6))) == {K.MISALIGNED}

    def test_fixed_offset_moved(self) -> None:
        p = Problem((Buffer("a", 0, 1, 4, 1, 4),))
        assert _kinds(check_dsa_solution(p, Solution((0,), 4))) == {K.FIXED_OFFSET}

    def test_beyond_capacity(self) -> None:
        assert _kinds(check_dsa_solution(self.p, Solution((0, 8, 0), 12))) == {K.OUT_OF_ARENA}

    def test_overlap(self) -> None:
        assert _kinds(check_dsa_solution(self.p, Solution((0, 2, 4), 8))) == {K.OVERLAP}

    def test_wrong_height(self) -> None:
        assert _kinds(check_dsa_solution(self.p, Solution((0, 4, 0), 9))) == {K.WRONG_HEIGHT}

    def test_zero_size_never_overlaps(self) -> None:
        p = Problem((Buffer("a", 0, 2, 4), Buffer("z", 0, 2, 0)))
        assert check_dsa_solution(p, Solution((0, 0), 4)) == []


_rect = st.tuples(st.integers(0, 6), st.integers(1, 4), st.integers(0, 12), st.integers(0, 5))


@given(st.lists(_rect, max_size=12))
def test_sweep_reports_exactly_the_overlapping_pairs(raw: list) -> None:  # type: ignore[type-arg]
    rects = [(f"r{i}", s, s + d, o, z) for i, (s, d, o, z) in enumerate(raw)]
    got = {frozenset(p) for p in _overlapping_pairs(rects)}
    want = {frozenset((a[0], b[0])) for i, a in enumerate(rects) for b in rects[:i]
            if a[4] and b[4] and a[1] < b[2] and b[1] < a[2] and a[3] < b[3] + b[4]
            and b[3] < a[3] + a[4]}
    assert got == want


def test_sweep_on_10k_tensors_finds_the_one_overlap() -> None:
    # (its speed is measured by benchmarks, not asserted here)
    rnd = random.Random(0)
    rects, top = [], 0
    for i in range(10_000):  # a valid layout: every rectangle on its own band
        size = rnd.randint(1, 100)
        rects.append((f"t{i}", rnd.randint(0, 5000), rnd.randint(5001, 10000), top, size))
        top += size
    assert _overlapping_pairs(rects) == []
    _, start, end, offset, size = rects[7000]
    rects.append(("late", start, end, offset + size - 1, 1))  # t7000's last byte
    assert [tuple(sorted(p)) for p in _overlapping_pairs(rects)] == [("late", "t7000")]
