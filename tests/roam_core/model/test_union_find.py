"""UnionFind: the groups it returns are the connected components, in a stable order."""

from __future__ import annotations

import networkx as nx
from hypothesis import given
from hypothesis import strategies as st

from roam_core.model.union_find import UnionFind


@given(st.integers(1, 30).flatmap(
    lambda n: st.tuples(st.just(n), st.lists(st.tuples(st.integers(0, n - 1),
                                                       st.integers(0, n - 1)), max_size=40))))
def test_groups_are_connected_components(case: tuple[int, list[tuple[int, int]]]) -> None:
    n, edges = case
    uf = UnionFind(range(n))
    for a, b in edges:
        uf.union(a, b)
    g = nx.Graph()
    g.add_nodes_from(range(n))
    g.add_edges_from(edges)
    want = sorted(sorted(c) for c in nx.connected_components(g))
    got = uf.groups()
    assert sorted(got) == want
    assert [grp[0] for grp in got] == sorted(grp[0] for grp in got)  # by first item
    assert all(uf.find(x) == grp[0] for grp in got for x in grp)  # root = earliest item
