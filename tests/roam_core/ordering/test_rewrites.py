"""Weight-update placement rewrites: only added edges, acyclic, valid reference order."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roam_core.base.errors import ConfigError
from roam_core.formats.graph_io import load_graph
from roam_core.model.graph import EdgeReason, Graph
from roam_core.model.samples import tiny_train_step
from roam_core.oracle.simulate import simulate
from roam_core.oracle.validate import check_order
from roam_core.ordering.rewrites import asap_insertion, place_weight_updates
from roam_core.ordering.update_groups import update_groups
from tests.builders import random_valid_order
from tests.paths import DATA_DIR, SAMPLE_DIR
from tests.strategies import random_graphs


def _check(graph: Graph, policy: str) -> None:
    r = place_weight_updates(graph, policy=policy)
    # only additions, all tagged WEIGHT_UPDATE
    assert r.graph.control_edges[: len(graph.control_edges)] == graph.control_edges
    assert set(r.edges) == set(r.graph.control_edges[len(graph.control_edges):])
    assert all(e.reason == EdgeReason.WEIGHT_UPDATE for e in r.edges)
    # the reference order is valid for the rewritten graph, hence for the input graph
    assert check_order(r.graph, r.order) == []
    assert check_order(graph, r.order) == []


@pytest.mark.slow
@settings(max_examples=30)
@given(random_graphs(max_ops=14))
def test_rewrites_only_add_edges_and_keep_a_valid_order(graph: Graph) -> None:
    for policy in ("cost_aware", "asap", "none"):
        _check(graph, policy)


@pytest.mark.parametrize("name", ["rewrites-split-group-1.json", "rewrites-split-group-2.json"])
def test_a_group_that_cannot_run_as_one_block_keeps_a_valid_order(name: str) -> None:
    """Found by the property above: an update group with an op outside it between its
    members (a later forward op mutates what one member updated). ASAP moved the group as one
    block past that op, breaking a mutation edge (graph 1) or adding a cycle (graph 2)."""
    graph = load_graph(DATA_DIR / name)
    for policy in ("cost_aware", "asap", "none"):
        _check(graph, policy)


def test_tiny_train_step_pins_loose_view() -> None:
    g = tiny_train_step()
    r = place_weight_updates(g)
    assert [(e.src, e.dst) for e in r.edges] == [("relu_bw", "t")]
    assert r.policy == "cost_aware"
    assert len(r.placements) == len(update_groups(g))


def test_unknown_policy_is_rejected() -> None:
    with pytest.raises(ConfigError, match="unknown update policy"):
        place_weight_updates(tiny_train_step(), policy="sometimes")


def test_asap_insertion_moves_groups_right_after_their_last_ancestor() -> None:
    g = tiny_train_step()
    late_first = ["mm", "relu", "loss", "ones", "relu_bw", "t", "grad_w", "update"]
    assert asap_insertion(g, late_first, [("update",)])[-1] == "update"


def test_cost_aware_reference_is_not_worse_than_asap_on_the_sample() -> None:
    g = tiny_train_step()
    cost = simulate(g, place_weight_updates(g, policy="cost_aware").order).peak_bytes
    asap = simulate(g, place_weight_updates(g, policy="asap").order).peak_bytes
    assert cost <= asap


@pytest.mark.slow
@settings(max_examples=40)
@given(random_graphs(max_ops=14), st.integers(0, 1000))
def test_just_in_time_moves_never_raise_the_peak(graph: Graph, seed: int) -> None:
    """The reference order handed in is only changed by moves that cannot raise the peak."""
    ref = random_valid_order(graph, seed)
    r = place_weight_updates(graph, reference=ref)
    assert check_order(r.graph, r.order) == []
    assert sorted(r.order) == sorted(ref)
    for a in (1, 512):
        assert (simulate(graph, r.order, alignment_bytes=a).peak_bytes
                <= simulate(graph, ref, alignment_bytes=a).peak_bytes), (ref, r.order)


@pytest.mark.slow
@settings(max_examples=40)
@given(random_graphs(max_ops=14), st.integers(0, 1000))
def test_renumbering_the_move_list_changes_nothing(graph: Graph, seed: int) -> None:
    """With keys one apart every move runs its gap out and the list is numbered again: the
    moves, the order and the edges are the same as with wide gaps."""
    from unittest import mock

    from roam_core.ordering import rewrites

    ref = random_valid_order(graph, seed)
    wide = place_weight_updates(graph, reference=ref)
    with mock.patch.object(rewrites, "_KEY_GAP", 1):
        tight = place_weight_updates(graph, reference=ref)
    assert (tight.order, tight.edges) == (wide.order, wide.edges)


@pytest.mark.slow
def test_sample_moves_are_the_known_ones() -> None:
    """The order and edges on a teaching graph and two traced models are those the
    dict-keyed linked list gave before the moves ran on program indices (hashes)."""
    import hashlib

    from roam_core.formats.graph_io import load_graph

    root = SAMPLE_DIR
    want = {"teach_updates-b8-steady.json.gz": "0b8dd457a304",
            "tiny_gpt-b2-t32-steady.json.gz": "d60487831a56",
            "mobilenet_v2-b8-steady.json.gz": "d3f1e21985a6"}
    got = {}
    for name in want:
        r = place_weight_updates(load_graph(root / name))
        got[name] = hashlib.sha256(("\n".join(r.order) + "|" + "\n".join(
            f"{e.src}>{e.dst}:{e.reason.value}" for e in r.edges)).encode()).hexdigest()[:12]
    assert got == want
