"""The brute-force oracle against networkx's enumeration of topological sorts."""

from __future__ import annotations

import networkx as nx
import pytest
from hypothesis import given

from roam_core.base.errors import GraphError
from roam_core.model.samples import chain3, diamond
from roam_core.oracle.brute_force import MAX_BRUTE_FORCE_OPS, all_orders, brute_force_order
from roam_core.oracle.simulate import simulate
from roam_core.oracle.validate import check_order
from tests.builders import two_param_step
from tests.strategies import random_graphs


def _nx(g):
    d = nx.DiGraph()
    d.add_nodes_from(g.op_ids)
    d.add_edges_from((a, b) for a, b, _ in g.edges())
    return d


def test_hand_graphs():
    assert brute_force_order(chain3(), alignment_bytes=1).peak_bytes == 200
    r = brute_force_order(diamond(), alignment_bytes=1)
    assert (r.peak_bytes, r.n_orders) == (350, 2)


@given(random_graphs(max_ops=7))
def test_min_over_networkx_topological_sorts(g):
    expected = min(simulate(g, o, alignment_bytes=1).peak_bytes
                   for o in nx.all_topological_sorts(_nx(g)))
    r = brute_force_order(g, alignment_bytes=1)
    assert r.peak_bytes == expected
    assert r.n_orders == sum(1 for _ in nx.all_topological_sorts(_nx(g)))
    assert check_order(g, r.order) == []
    assert all(check_order(g, o) == [] for o in all_orders(g))


def test_refuses_large_graphs():
    g = two_param_step("adam")
    assert len(g.ops) > MAX_BRUTE_FORCE_OPS
    with pytest.raises(GraphError, match="at most"):
        brute_force_order(g)
