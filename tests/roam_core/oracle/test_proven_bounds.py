"""Restriction bounds (CP-SAT over any op subset) held against exact optima."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from roam_core.model.samples import chain3, diamond, tiny_train_step
from roam_core.oracle.bounds import (
    best_lower_bound,
    group_lower_bound,
    peak_window_groups,
    restriction_bound,
    storage_masks,
    window_bound,
)
from roam_core.oracle.brute_force import brute_force_order
from roam_core.oracle.simulate import simulate
from roam_core.ordering.monolithic import solve_monolithic
from tests.paths import SAMPLE_DIR
from tests.strategies import orders_of, random_graphs

#: How often the bound met the optimum, per test (printed with -s; never asserted on).
TIGHT: Counter[str] = Counter()


def _opt(g, a: int) -> int:
    return brute_force_order(g, alignment_bytes=a).peak_bytes


def test_hand_examples():
    for g in (chain3(), diamond(), tiny_train_step()):
        opt = _opt(g, 1)
        assert restriction_bound(g, g.op_ids, alignment_bytes=1).bound_bytes == opt
        for op in g.op_ids:  # singletons give at least nothing above the optimum
            assert restriction_bound(g, [op], alignment_bytes=1).bound_bytes <= opt


def test_singleton_matches_live_set_bound_on_diamond():
    g = diamond()
    # the live-set bound is the max over singleton groups of the restriction bound
    singles = max(restriction_bound(g, [op], alignment_bytes=1).bound_bytes for op in g.op_ids)
    from roam_core.oracle.bounds import live_set_lower_bound

    assert singles == live_set_lower_bound(g, alignment_bytes=1).bound_bytes


def test_empty_and_oversized_groups():
    g = diamond()
    assert restriction_bound(g, [], alignment_bytes=1).bound_bytes == 0
    rb = restriction_bound(g, g.op_ids, alignment_bytes=1, max_ops=2)
    assert rb.status == "skipped"
    assert rb.bound_bytes == 0


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_graphs(max_ops=8), st.sampled_from([1, 512]))
def test_all_ops_is_exact(g, a):
    """With every op in the group the model is the exact problem."""
    opt = _opt(g, a)
    rb = restriction_bound(g, g.op_ids, alignment_bytes=a, time_limit_s=5.0)
    assert rb.status == "optimal"
    assert rb.bound_bytes == opt


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_any_subset_is_below_the_optimum(data):
    g = data.draw(random_graphs(max_ops=8))
    a = data.draw(st.sampled_from([1, 512]))
    sub = data.draw(st.lists(st.sampled_from(list(g.op_ids)), unique=True))
    hint = data.draw(orders_of(g))
    opt = _opt(g, a)
    rb = restriction_bound(g, sub, alignment_bytes=a, hint_order=hint, time_limit_s=5.0)
    assert rb.bound_bytes <= opt
    TIGHT["subset"] += rb.bound_bytes == opt
    TIGHT["subset_n"] += 1
    # never weaker than the update-group DP on the same group
    gb = group_lower_bound(g, sub, a)
    if gb is not None and rb.status == "optimal":
        assert rb.bound_bytes >= gb.bound_bytes


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_window_bound_below_optimum(data):
    g = data.draw(random_graphs(max_ops=8))
    order = data.draw(orders_of(g))
    w = data.draw(st.integers(0, 3))
    opt = _opt(g, 512)
    best, _ = window_bound(g, order, 512, half_widths=(w,), max_windows=2)
    assert best <= opt
    assert best >= g.resident_bytes(512)
    TIGHT["window"] += best == opt
    TIGHT["window_n"] += 1
    TIGHT["window_vs_old"] += best > best_lower_bound(g, 512).bound_bytes


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_subset_below_monolithic_on_larger_graphs(data):
    g = data.draw(random_graphs(max_ops=14, min_ops=9))
    mono = solve_monolithic(g, time_limit_s=10.0)
    if mono.status != "optimal":
        return
    sub = data.draw(st.lists(st.sampled_from(list(g.op_ids)), unique=True, max_size=10))
    rb = restriction_bound(g, sub, alignment_bytes=512, time_limit_s=5.0)
    assert rb.bound_bytes <= mono.peak_bytes


def test_storage_masks_cover_planned_storages():
    g = tiny_train_step()
    sm = storage_masks(g, 1)
    assert len(sm.sizes) == sum(1 for t in g.tensors.values()
                                if t.producer is not None and t.size_bytes)
    assert sm.resident_bytes == g.resident_bytes(1)


def test_peak_windows_are_distinct_and_centred():
    g = tiny_train_step()
    prof = simulate(g, g.op_ids, alignment_bytes=1)
    wins = peak_window_groups(g.op_ids, prof.live_bytes, half_width=1, max_windows=3)
    assert wins
    assert prof.peak_step in [g.op_ids.index(o) for o in wins[0][1]]
    assert len({w[1] for w in wins}) == len(wins)


def teardown_module() -> None:
    if TIGHT["subset_n"]:
        print(f"\nrestriction bound tight on {TIGHT['subset']}/{TIGHT['subset_n']} random "
              f"subsets; window bound tight on {TIGHT['window']}/{TIGHT['window_n']}, above "
              f"the old best bound on {TIGHT['window_vs_old']}; choice bound tight on "
              f"{TIGHT['choice']}/{TIGHT['choice_n']}, above the old on "
              f"{TIGHT['choice_vs_old']}; chain-group bound tight on {TIGHT['chain']}/"
              f"{TIGHT['chain_n']}, above the old on {TIGHT['chain_vs_old']}")


# ------------------------------------------------------------------ choice bound
@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_choice_bound_below_the_optimum(data):
    from roam_core.oracle.bounds import choice_lower_bound, free_branch_groups, live_set_lower_bound

    g = data.draw(random_graphs(max_ops=8))
    a = data.draw(st.sampled_from([1, 512]))
    opt = _opt(g, a)
    # default groups, and random disjoint groups
    ops = list(g.op_ids)
    labels = data.draw(st.lists(st.integers(0, 3), min_size=len(ops), max_size=len(ops)))
    rand = [tuple(o for o, lab in zip(ops, labels, strict=True) if lab == k) for k in range(3)]
    for groups in (None, rand, free_branch_groups(g, 3)):
        cb = choice_lower_bound(g, a, groups=groups)
        assert cb.bound_bytes <= opt
        assert cb.bound_bytes >= live_set_lower_bound(g, a).bound_bytes
    TIGHT["choice"] += cb.bound_bytes == opt
    TIGHT["choice_n"] += 1
    TIGHT["choice_vs_old"] += cb.bound_bytes > best_lower_bound(g, a).bound_bytes



@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_choice_bound_classes_as_bitsets_equal_the_per_op_columns(data):
    """The incomparable ops split into classes as bitsets (few classes) give the per-op
    bytes of the path that reads every op's column (many classes): both paths forced."""
    from roam_core.oracle.bounds import choice as pb

    g = data.draw(random_graphs(max_ops=10))
    a = data.draw(st.sampled_from([1, 512]))
    ops = list(g.op_ids)
    labels = data.draw(st.lists(st.integers(0, 2), min_size=len(ops), max_size=len(ops)))
    groups = [tuple(o for o, lab in zip(ops, labels, strict=True) if lab == k)
              for k in range(2)]
    out = []
    saved = pb._MAX_CLASSES
    try:
        for limit in (0, 10_000):
            pb._MAX_CLASSES = limit
            out.append([pb.choice_lower_bound(g, a, groups=gr) for gr in (None, groups)])
    finally:
        pb._MAX_CLASSES = saved
    assert out[0] == out[1]


def test_choice_bound_paths_agree_on_a_transformer_step(monkeypatch):
    from roam_core.formats.graph_io import load_graph
    from roam_core.oracle.bounds import choice as pb
    from roam_core.oracle.bounds import forward_value_groups, live_set_lower_bound

    g = load_graph(SAMPLE_DIR
                   / "tiny_gpt-b2-t32-steady.json.gz")
    groups = forward_value_groups(g)
    out = []
    for limit in (0, pb._MAX_CLASSES):
        monkeypatch.setattr(pb, "_MAX_CLASSES", limit)
        out.append([pb.choice_lower_bound(g, 512, groups=gr) for gr in (None, groups)])
    assert out[0] == out[1]
    assert out[0][0].bound_bytes >= live_set_lower_bound(g, 512).bound_bytes

def test_choice_bound_sees_gradient_or_state():
    """One parameter update: the gradient waits (4 KiB) or the state exists (8 KiB)."""
    from roam_core.model.graph import Graph, Op, OpId, Phase, Tensor, TensorId, TensorKind
    from roam_core.oracle.bounds import choice_lower_bound, live_set_lower_bound

    def t(i, size, kind, prod):
        return Tensor(TensorId(i), size, "float32", (1,), kind, OpId(prod) if prod else None)

    ops = [
        Op(OpId("f"), "aten.mm.default", Phase.FORWARD, ("w",), ("act",)),
        Op(OpId("gw"), "aten.mm.default", Phase.BACKWARD, ("act",), ("grad",)),
        Op(OpId("b"), "aten.mm.default", Phase.BACKWARD, ("act",), ("big",)),
        Op(OpId("b2"), "aten.relu.default", Phase.BACKWARD, ("big",), ("out",)),
        Op(OpId("s"), "aten.zeros_like.default", Phase.OPTIMIZER, ("w",), ("state",)),
        Op(OpId("u"), "aten.add_.Tensor", Phase.OPTIMIZER, ("grad", "state", "w"), (),
           ("w",)),
    ]
    tensors = [t("w", 4096, TensorKind.PARAMETER, None),
               t("act", 4096, TensorKind.ACTIVATION, "f"),
               t("grad", 4096, TensorKind.GRADIENT, "gw"),
               t("big", 40960, TensorKind.TEMPORARY, "b"),
               t("gb", 512, TensorKind.TEMPORARY, "b2"),
               t("out", 512, TensorKind.OUTPUT, "b2"),
               t("state", 8192, TensorKind.OPTIMIZER_STATE, "s")]
    g = Graph.build(ops, tensors, (), (), ("out", "state"), name="choice")
    opt = _opt(g, 1)
    cb = choice_lower_bound(g, 1)
    assert cb.bound_bytes <= opt
    assert cb.bound_bytes > live_set_lower_bound(g, 1).bound_bytes


# ------------------------------------------------------------- chain-group bound
@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_chain_group_bound_below_the_optimum(data):
    from roam_core.model.reach import reachability
    from roam_core.oracle.bounds import chain_group_lower_bound, greedy_chain

    g = data.draw(random_graphs(max_ops=8))
    a = data.draw(st.sampled_from([1, 512]))
    opt = _opt(g, a)
    ops = list(g.op_ids)
    labels = data.draw(st.lists(st.integers(0, 3), min_size=len(ops), max_size=len(ops)))
    groups = [tuple(o for o, lab in zip(ops, labels, strict=True) if lab == k)
              for k in (1, 2, 3)]
    order = data.draw(orders_of(g))
    r = reachability(g)
    in_group = {o for gr in groups for o in gr}
    for kw in ({}, {"groups": groups}, {"groups": groups, "chain": "greedy"},
               {"groups": groups,
                "chain": greedy_chain(order, r, in_group | set(data.draw(
                    st.lists(st.sampled_from(ops), unique=True))))}):
        cb = chain_group_lower_bound(g, order, a, reach=r, **kw)
        assert cb.bound_bytes <= opt, kw
    TIGHT["chain"] += cb.bound_bytes == opt
    TIGHT["chain_n"] += 1
    TIGHT["chain_vs_old"] += cb.bound_bytes > best_lower_bound(g, a).bound_bytes


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_peak_window_chain_bound_below_the_optimum(data):
    """The peak-window chain-group bound, from any order (the brute-force optimal one
    included) and any widths, never exceeds the optimum, nor the order's own peak."""
    from roam_core.oracle.bounds import peak_window_chain_bound

    g = data.draw(random_graphs(max_ops=8))
    a = data.draw(st.sampled_from([1, 512]))
    best = brute_force_order(g, alignment_bytes=a)
    widths = data.draw(st.lists(st.integers(0, 4), min_size=1, max_size=3))
    for order in (data.draw(orders_of(g)), best.order):
        b = peak_window_chain_bound(g, order, a, half_widths=widths,
                                    max_peaks=data.draw(st.integers(1, 3)))
        assert b.bound_bytes <= best.peak_bytes
        assert b.bound_bytes <= simulate(g, order, alignment_bytes=a).peak_bytes
    TIGHT["peak_chain"] += b.bound_bytes == best.peak_bytes
    TIGHT["peak_chain_n"] += 1


def _checkpoint_peak_graph():
    """The GPT-2 checkpoint peak in miniature (sizes in 512-byte units): ``big`` (10, the
    held tied-embedding gradient) lives from the first op to the last; after the loss, a
    weight-gradient matmul ``wg`` (output ``w``, 3, freed by its update ``upd``) reads ``h``
    (4, read by nothing else after ``mk_g``) and ``g`` (1), which the input-gradient op
    ``ig`` (output ``i``, 4) reads too."""
    from roam_core.model.graph import Graph, Op, OpId, Phase, Tensor, TensorId, TensorKind

    fw, lo, bw, opt = Phase.FORWARD, Phase.LOSS, Phase.BACKWARD, Phase.OPTIMIZER

    def op(name, phase, ins, outs):
        return Op(OpId(name), "aten.mm.default", phase, tuple(ins), tuple(outs))

    def t(name, units, prod):
        return Tensor(TensorId(name), units * 512, "float32", (units * 128,),
                      TensorKind.TEMPORARY, OpId(prod))

    ops = [op("mk_big", fw, (), ("big", "x")), op("mk_h", fw, ("x",), ("h",)),
           op("loss", lo, ("x",), ("l",)), op("mk_g", bw, ("h", "l"), ("g",)),
           op("wg", bw, ("h", "g"), ("w",)), op("upd", opt, ("w",), ("u",)),
           op("ig", bw, ("g",), ("i",)), op("use", bw, ("i", "big"), ("out",))]
    tensors = [t("big", 10, "mk_big"), t("x", 1, "mk_big"), t("h", 4, "mk_h"),
               t("l", 1, "loss"), t("g", 1, "mk_g"), t("w", 3, "wg"), t("u", 0, "upd"),
               t("i", 4, "ig"), t("out", 0, "use")]
    return Graph.build(ops, tensors, name="checkpoint-peak")


def test_peak_window_chain_bound_sees_the_weight_gradient_at_the_peak():
    """Run ``wg`` first: ``big`` + 4 + 1 + 3 at it; ``ig`` first: ``h`` waits under ``i``,
    more; ``wg`` after ``use``: ``h`` and ``g`` wait under ``big`` and ``i``.  The live-set
    bound sees none of it (``big`` is not forced at ``wg``, whose descendants do not read
    it); the window of the ops at the optimal order's peak proves the optimum, and the
    planner reports it (``peak_window`` record, proven gap 1)."""
    from roam_core.oracle.bounds import peak_window_chain_bound
    from roam_core.planner import make_plan
    from roam_core.planner.config import PlannerConfig

    g = _checkpoint_peak_graph()
    best = brute_force_order(g, alignment_bytes=512)
    assert best.peak_bytes == 18 * 512
    b = peak_window_chain_bound(g, best.order, 512)
    assert b.bound_bytes == best.peak_bytes
    assert best_lower_bound(g, 512).bound_bytes < best.peak_bytes
    p = make_plan(g, PlannerConfig(workers=1, solve_layout=False, polish_rounds=0,
                                   search_evaluations=0))
    assert p.planned_peak_bytes == p.lower_bound_bytes == best.peak_bytes
    rec = next(r for r in p.provenance if r.stage == "bound" and r.task_id == "peak_window")
    assert rec.best_bound == best.peak_bytes
    # the chain-group bound is not needed once the gap is closed
    assert not any(r.stage == "bound" and r.task_id == "chain_group" for r in p.provenance)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_chain_group_with_whole_graph_split_is_exact_when_chain_is_all(data):
    """With a chain graph (every op comparable) and no group, the chain alone is exact."""
    from roam_core.oracle.bounds import chain_group_lower_bound

    g = data.draw(random_graphs(max_ops=6))
    a = 1
    opt = _opt(g, a)
    cb = chain_group_lower_bound(g, g.op_ids, a, groups=[])
    assert cb.bound_bytes <= opt


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_chain_group_and_choice_below_monolithic_on_larger_graphs(data):
    from roam_core.oracle.bounds import chain_group_lower_bound, choice_lower_bound

    g = data.draw(random_graphs(max_ops=14, min_ops=9))
    mono = solve_monolithic(g, time_limit_s=10.0)
    if mono.status != "optimal":
        return
    ops = list(g.op_ids)
    labels = data.draw(st.lists(st.integers(0, 2), min_size=len(ops), max_size=len(ops)))
    groups = [tuple(o for o, lab in zip(ops, labels, strict=True) if lab == k) for k in (1, 2)]
    for grp in (None, groups):
        assert chain_group_lower_bound(g, None, 512, groups=grp).bound_bytes <= mono.peak_bytes
        assert choice_lower_bound(g, 512, groups=grp).bound_bytes <= mono.peak_bytes


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_chain_group_with_overlapping_groups(data):
    """Each group is solved on its own, so groups may overlap (singletons included)."""
    from roam_core.oracle.bounds import chain_group_lower_bound

    g = data.draw(random_graphs(max_ops=8))
    ops = list(g.op_ids)
    groups = data.draw(st.lists(st.lists(st.sampled_from(ops), unique=True, min_size=1,
                                         max_size=4), max_size=4))
    opt = _opt(g, 512)
    assert chain_group_lower_bound(g, None, 512, groups=groups).bound_bytes <= opt


def test_planner_reports_the_tightened_bound():
    from roam_core.planner import make_plan
    from roam_core.planner.config import PlannerConfig

    g = tiny_train_step()
    p = make_plan(g, PlannerConfig(workers=1, solve_layout=False))
    assert p.lower_bound_bytes <= p.planned_peak_bytes
    assert p.lower_bound_bytes <= _opt(g, 512)


@given(st.lists(st.one_of(st.integers(0, 50).map(float), st.just(float("inf"))),
                min_size=2, max_size=40), st.data())
def test_chain_scan_matches_the_loop(entry, data):
    import numpy as np

    from roam_core.oracle.bounds.chain import _chain_scan

    m = len(entry) - 1
    cost = data.draw(st.lists(st.integers(0, 50).map(float), min_size=m, max_size=m))
    stop = data.draw(st.integers(0, m))
    want = list(entry)
    for i in range(stop):
        want[i + 1] = min(want[i + 1], max(want[i], cost[i]))
    got = _chain_scan(np.asarray(entry), np.asarray(cost), stop)
    assert got.tolist() == want


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_chain_window_fast_path_matches_iterating_the_bits(data):
    """With a monotone chain the last / first chain ancestor / descendant of an op is the
    highest / lowest set bit; the fast path gives what iterating every chain bit gives."""
    from roam_core.model.reach import reachability
    from roam_core.oracle.bounds.chain import _chain_window, greedy_chain

    g = data.draw(random_graphs(max_ops=10))
    r = reachability(g)
    order = data.draw(orders_of(g))
    ch = greedy_chain(order, r, set())
    cidx = [r.index[o] for o in ch]
    cpos = {x: j for j, x in enumerate(cidx)}
    cmask = sum(1 << x for x in cidx)
    monotone = all(x < y for x, y in itertools.pairwise(cidx))
    for i in range(len(g.op_ids)):
        slow = _chain_window(r.ancestors[i], r.descendants[i], cmask, cpos, False, len(ch))
        assert _chain_window(r.ancestors[i], r.descendants[i], cmask, cpos, monotone,
                             len(ch)) == slow


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.data())
def test_chain_stop_from_the_lowest_needed_position(data):
    """The chain-group DP lets the chain step while no U op outside the down-set is needed:
    the first such step is the lowest ``hi_u`` outside it (was a scan of every chain step)."""
    m = data.draw(st.integers(0, 12))
    hi_u = data.draw(st.lists(st.integers(0, m), min_size=1, max_size=6))
    d = data.draw(st.integers(0, (1 << len(hi_u)) - 1))
    need = [0] * (m + 1)
    for j, h in enumerate(hi_u):
        if h < m:
            for i in range(h, m + 1):
                need[i] |= 1 << j
    scanned = next((i for i in range(m) if need[i] & ~d), m)
    needed_at = [(h, j) for j, h in enumerate(hi_u) if h < m]
    assert min((h for h, j in needed_at if not d >> j & 1), default=m) == scanned


@pytest.mark.slow
@pytest.mark.parametrize(("name", "expected"), [
    ("gpt2-b1-t128-steady", (1956523520, ("add_61",), 995, 64)),
    ("teach_updates-b8-steady", (30195712, ("div",), 37, 54)),
    ("tiny_gpt-b2-t32-steady", (2278912, (), 111, 52)),
])
def test_chain_group_bound_unchanged_on_sample_graphs(name, expected) -> None:
    """The storage classes per group come from columns gathered once (not a mask AND per
    storage and group); the bound, its group, chain and groups used are those of main
    90d86dd."""

    from roam_core.formats.graph_io import load_graph
    from roam_core.oracle.bounds import chain_group_lower_bound, storage_masks

    root = SAMPLE_DIR
    g = load_graph(root / f"{name}.json.gz")
    cb = chain_group_lower_bound(g, None, 512)  # masks streamed
    assert (cb.bound_bytes, tuple(cb.group), cb.chain_ops, cb.groups_used) == expected
    given = chain_group_lower_bound(g, None, 512, masks=storage_masks(g, 512))
    assert given == cb


# --------------------------------------------------- forward-value groups (choice bound)
@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_forward_value_choice_bound_below_the_optimum(data):
    from roam_core.model.graph import Phase
    from roam_core.model.reach import reachability
    from roam_core.oracle.bounds import (
        choice_lower_bound,
        forward_value_groups,
        live_set_lower_bound,
    )

    g = data.draw(random_graphs(max_ops=8))
    a = data.draw(st.sampled_from([1, 512]))
    opt = _opt(g, a)
    r = reachability(g)
    groups = forward_value_groups(g, data.draw(st.integers(1, 8)), reach=r)
    seen: set[str] = set()
    for grp in groups:  # disjoint backward ops, none after a loss op
        assert not seen & set(grp)
        seen |= set(grp)
        for op in grp:
            assert g.op(op).phase is Phase.BACKWARD
            assert not any(g.op(o).phase is Phase.LOSS and r.index[op] in
                           {r.index[d] for d in g.op_ids if r.descendants[r.index[o]] >>
                            r.index[d] & 1} for o in g.op_ids)
    cb = choice_lower_bound(g, a, groups=groups, reach=r)
    assert cb.bound_bytes <= opt
    assert cb.bound_bytes >= live_set_lower_bound(g, a).bound_bytes
    TIGHT["forward_values"] += cb.bound_bytes == opt
    TIGHT["forward_values_n"] += 1


def _gelu_like_step():
    """A forward value ``x`` that only the backward reads through ``m = 3 * x**2``.

    Either ``x`` (not yet squared) or ``px`` / ``mx`` (squared early) is live while the
    backward's ``big`` exists: the live-set argument forces none of them.
    """
    from roam_core.model.graph import Graph, Op, OpId, Phase, Tensor, TensorId, TensorKind

    def t(i, size, kind, prod):
        return Tensor(TensorId(i), size, "float32", (1,), kind, OpId(prod) if prod else None)

    ops = [
        Op(OpId("f"), "aten.mm.default", Phase.FORWARD, ("w",), ("x",)),
        Op(OpId("l"), "aten.sum.default", Phase.LOSS, ("x",), ("loss",)),
        Op(OpId("gl"), "aten.ones_like.default", Phase.BACKWARD, ("loss",), ("gy",)),
        Op(OpId("p"), "aten.pow.Tensor_Scalar", Phase.BACKWARD, ("x",), ("px",)),
        Op(OpId("m"), "aten.mul.Scalar", Phase.BACKWARD, ("px",), ("mx",)),
        Op(OpId("b"), "aten.mm.default", Phase.BACKWARD, ("gy",), ("big",)),
        Op(OpId("b2"), "aten.relu.default", Phase.BACKWARD, ("big",), ("gb",)),
        Op(OpId("gx"), "aten.mul.Tensor", Phase.BACKWARD, ("gb", "mx"), ("grad",)),
    ]
    tensors = [t("w", 4096, TensorKind.PARAMETER, None),
               t("x", 4096, TensorKind.ACTIVATION, "f"),
               t("loss", 512, TensorKind.OUTPUT, "l"),
               t("gy", 512, TensorKind.GRADIENT, "gl"),
               t("px", 4096, TensorKind.TEMPORARY, "p"),
               t("mx", 4096, TensorKind.TEMPORARY, "m"),
               t("big", 40960, TensorKind.TEMPORARY, "b"),
               t("gb", 512, TensorKind.TEMPORARY, "b2"),
               t("grad", 4096, TensorKind.GRADIENT, "gx")]
    return Graph.build(ops, tensors, (), (), ("loss", "grad"), name="gelu_like")


def test_forward_value_bound_sees_product_or_input():
    from roam_core.oracle.bounds import choice_lower_bound, forward_value_groups

    g = _gelu_like_step()
    assert forward_value_groups(g) == [("p", "m")]
    opt = _opt(g, 1)
    cb = choice_lower_bound(g, 1, groups=forward_value_groups(g))
    assert best_lower_bound(g, 1).bound_bytes < cb.bound_bytes == opt


def test_planner_uses_the_forward_value_bound():
    from roam_core.planner import make_plan
    from roam_core.planner.config import PlannerConfig

    g = _gelu_like_step()
    opt = _opt(g, 512)
    p = make_plan(g, PlannerConfig(workers=1, solve_layout=False, polish_rounds=0,
                                   search_evaluations=0))
    assert p.planned_peak_bytes == opt
    assert p.lower_bound_bytes == opt
    assert p.proven_gap == 1.0
    assert any(r.stage == "bound" and r.task_id == "forward_values" for r in p.provenance)
    off = make_plan(g, PlannerConfig(workers=1, solve_layout=False, tighten_bound=False))
    assert off.lower_bound_bytes < opt


@pytest.mark.slow
def test_forward_value_bound_on_hf_gpt2():
    """HF GPT-2's tanh GELU: ``3 * x**2`` of each MLP is a forward-value group."""
    pytest.importorskip("transformers")
    from roam_core.oracle.bounds import choice_lower_bound, forward_value_groups
    from roam_core.zoo.hf import trace_hf

    g = trace_hf("gpt2", 1, 16, n_layer=2, n_embd=32, n_head=2, vocab_size=100,
                 n_positions=16).graph
    groups = forward_value_groups(g)
    assert len(groups) == 2
    assert all({str(g.op(o).target) for o in grp} == {"aten.pow.Tensor_Scalar",
                                                       "aten.mul.Scalar"} for grp in groups)
    cb = choice_lower_bound(g, 512, groups=groups)
    assert cb.bound_bytes > best_lower_bound(g, 512).bound_bytes
    assert cb.bound_bytes <= simulate(g, alignment_bytes=512).peak_bytes


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_chain_group_one_gap_skip_keeps_the_bound(data):
    """Skipping a group whose one-gap interleaving is no higher than the best so far leaves
    the bound and its group as the full DP of every group gives them."""
    from unittest import mock

    from roam_core.oracle.bounds import chain, chain_group_lower_bound

    g = data.draw(random_graphs(max_ops=10))
    a = data.draw(st.sampled_from([1, 512]))
    got = chain_group_lower_bound(g, None, a)
    with mock.patch.object(chain, "_one_gap_cost", return_value=float("inf")):
        full = chain_group_lower_bound(g, None, a)
    assert (got.bound_bytes, got.group) == (full.bound_bytes, full.group)
