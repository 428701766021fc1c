"""Program indices of orders, mapped once per tuple and shared by the checker and the
simulator."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from roam_core.model import positions
from roam_core.model.positions import order_indices, program_index
from roam_core.model.samples import diamond
from roam_core.oracle.simulate import simulate
from roam_core.oracle.validate import check_order
from tests.strategies import orders_of, random_graphs


@pytest.mark.slow
@given(random_graphs(), st.data())
def test_order_indices_are_the_program_indices(g, data) -> None:
    order = data.draw(orders_of(g))
    want = [g.op_ids.index(op) for op in order]
    for seq in (tuple(order), list(order)):
        got = order_indices(g, seq)
        assert got.tolist() == want
        assert not got.flags.writeable  # shared: nobody may write into it
    assert dict(program_index(g)) == {op: i for i, op in enumerate(g.op_ids)}


def test_a_tuple_is_mapped_once_and_a_list_every_time() -> None:
    g = diamond()
    order = ("a", "c", "b", "d")
    first = order_indices(g, order)
    assert order_indices(g, order) is first
    assert order_indices(g, tuple(op for op in order)) is not first  # equal, another object
    listed = ["a", "c", "b", "d"]
    a = order_indices(g, listed)
    listed[1], listed[2] = listed[2], listed[1]  # a list can change under the same id
    assert order_indices(g, listed).tolist() == [0, 1, 2, 3] != a.tolist()


def test_the_checker_and_the_simulator_share_one_mapping() -> None:
    g = diamond()
    order = ("a", "b", "c", "d")
    assert check_order(g, order) == []
    cached = order_indices(g, order)
    simulate(g, order)
    assert order_indices(g, order) is cached
    copy = g.with_control_edges([])  # same op ids: the same program index
    assert program_index(copy) is program_index(g)


def test_unknown_ops_raise_and_are_not_remembered() -> None:
    g = diamond()
    with pytest.raises(KeyError):
        order_indices(g, ("a", "nope", "c", "d"))
    assert not any(hit[1] == ("a", "nope", "c", "d") for hit in positions._ORDERS.values())


def test_the_caches_stay_bounded_and_hold_what_they_key() -> None:
    g = diamond()
    orders = [("a", "b", "c", "d") + ("a",) * k for k in range(3 * positions._KEPT_ORDERS)]
    arrays = [order_indices(g, o) for o in orders]
    assert len(positions._ORDERS) <= positions._KEPT_ORDERS
    for (ids_id, order_id), (ids, order, arr) in positions._ORDERS.items():
        assert ids_id == id(ids)  # both held: their ids cannot be reused
        assert order_id == id(order)
        assert np.array_equal(arr, order_indices(g, list(order)))
    assert [a.tolist()[:4] for a in arrays] == [[0, 1, 2, 3]] * len(orders)


@pytest.mark.slow
@given(random_graphs(min_ops=2), st.data())
def test_orders_built_from_indices_are_not_looked_up_again(g, data) -> None:
    """A whole order that a compact view builds from indices (and program order itself) is
    found without a lookup per op; its indices are the ones it was built from."""
    from unittest import mock

    from roam_core.model import dag_view

    order = data.draw(orders_of(g))
    cg = dag_view.compact(g)
    idx = [cg.index[op] for op in order]
    with mock.patch.object(dag_view, "_REMEMBER_FROM", 1):
        built = cg.order_ids(idx)
        sub, _ = cg.subgraph(range(len(idx) - 1))
        part = sub.order_ids(range(len(idx) - 1))  # a sub-view's order: not remembered
    with mock.patch.object(positions, "program_index", side_effect=AssertionError("looked up")):
        assert order_indices(g, built).tolist() == idx
        assert order_indices(g, g.op_ids).tolist() == list(range(len(g.op_ids)))
    assert order_indices(g, part).tolist() == [g.op_ids.index(op) for op in part]
