"""Bytes at the peak by module (``roam_core.oracle.attribution``) and ``roam info --json``."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roam_core.cli import main
from roam_core.formats.graph_io import save_graph
from roam_core.model.graph import Graph, Op, OpId, Phase, Tensor, TensorId, TensorKind
from roam_core.oracle.attribution import (
    bytes_at_peak_by_module,
    bytes_live_at_step_by_module,
    depth_bytes,
    in_module,
    module_bytes_per_step,
    subtree_bytes,
    tensor_module,
)
from roam_core.oracle.simulate import lifetimes, simulate
from tests.paths import SAMPLE_DIR
from tests.strategies import orders_of, random_graphs

K = TensorKind


def _named_step() -> Graph:
    """Two Linear-like modules: a forward, a backward and an update of ``b.fc.weight``."""
    def t(tid, size, kind, p=None, name=None):
        return Tensor(TensorId(tid), size, "float32", (size // 4,), kind,
                      OpId(p) if p else None, name=name)

    ops = [
        Op(OpId("mm1"), "aten.mm.default", Phase.FORWARD, ("x", "w1"), ("h1",),
           module="a.fc"),
        Op(OpId("mm2"), "aten.mm.default", Phase.FORWARD, ("h1", "w2"), ("out",),
           module="b.fc"),
        Op(OpId("loss"), "aten.sum.default", Phase.LOSS, ("out",), ("loss",)),
        Op(OpId("gw2"), "aten.mm.default", Phase.BACKWARD, ("h1", "loss"), ("g2",),
           module="b.fc"),
        Op(OpId("upd"), "aten.add_.Tensor", Phase.OPTIMIZER, ("w2", "g2", "m2"), (),
           mutates=(TensorId("w2"), TensorId("m2")), module="b.fc"),
    ]
    tensors = [
        t("x", 1024, K.INPUT, name="inputs[0]"), t("w1", 4096, K.PARAMETER, name="a.fc.weight"),
        t("w2", 2048, K.PARAMETER, name="b.fc.weight"),
        t("m2", 2048, K.OPTIMIZER_STATE, name="b.fc.weight.exp_avg"),
        t("c", 512, K.BUFFER),
        t("h1", 8192, K.ACTIVATION, "mm1"), t("out", 512, K.ACTIVATION, "mm2"),
        t("loss", 4, K.OUTPUT, "loss"), t("g2", 2048, K.GRADIENT, "gw2",
                                         name="b.fc.weight.grad"),
    ]
    return Graph.build(ops, tensors, outputs=[TensorId("loss")], name="named")


def test_storages_go_to_their_producer_or_their_owner() -> None:
    g = _named_step()
    got = {tid: tensor_module(g, t) for tid, t in g.tensors.items()}
    assert got == {"x": "", "w1": "a.fc", "w2": "b.fc", "m2": "b.fc", "c": "", "h1": "a.fc",
                   "out": "b.fc", "loss": "", "g2": "b.fc"}


def test_peak_split_by_module_and_kind() -> None:
    g = _named_step()
    a = bytes_at_peak_by_module(g, alignment_bytes=1)
    prof = simulate(g, alignment_bytes=1)
    assert (a.step, a.total_bytes) == (prof.peak_step, prof.peak_bytes)
    assert sum(a.own_bytes().values()) == prof.peak_bytes
    lts = lifetimes(g, g.op_ids)
    live = {tid for tid, lt in lts.items() if lt.start <= a.step < lt.end}
    own = a.own_bytes()
    want: dict[str, int] = {}
    for tid, t in g.tensors.items():
        if t.producer is None or tid in live:
            m = tensor_module(g, t)
            want[m] = want.get(m, 0) + t.size_bytes
    assert own == want
    kinds = a.kind_bytes()
    assert kinds["b.fc"]["parameter"] == 2048
    assert kinds["b.fc"]["optimizer_state"] == 2048
    assert a.top_level_bytes() == depth_bytes(own, 1)
    assert a.modules[0].total_bytes == max(own.values())  # largest first
    assert a.modules[0].tensors[0] == max(
        a.modules[0].tensors, key=lambda i: g.tensors[i].size_bytes)


def test_tree_helpers() -> None:
    own = {"h.0.attn": 5, "h.0": 1, "h.1.mlp": 4, "wte": 2, "": 3}
    sub = subtree_bytes(own)
    assert sub["h"] == 10
    assert sub["h.0"] == 6
    assert sub[""] == 3
    for d in (1, 2, 3):
        assert sum(depth_bytes(own, d).values()) == sum(own.values())
    assert in_module("h.0.attn", "h")
    assert not in_module("h.10", "h.1")
    assert not in_module("wte", "")


@pytest.mark.slow
@given(st.data())
def test_module_bytes_add_up_to_the_peak_for_any_order(data) -> None:
    g = data.draw(random_graphs())
    order = data.draw(orders_of(g))
    mods = ["", "a", "a.b", "c"]
    ops = [dataclasses.replace(op, module=data.draw(st.sampled_from(mods))) for op in g.ops]
    g = Graph.build(ops, g.tensors.values(), g.aliases, g.control_edges, g.outputs)
    prof = simulate(g, order)
    a = bytes_at_peak_by_module(g, order)
    assert a.total_bytes == prof.peak_bytes == sum(a.own_bytes().values())
    assert sum(a.top_level_bytes().values()) == prof.peak_bytes
    for m in a.modules:
        assert sum(m.bytes_by_kind.values()) == m.total_bytes
    if len(order):
        other = data.draw(st.integers(0, len(order) - 1))
        at = bytes_live_at_step_by_module(g, order, other)
        assert at.total_bytes == prof.total_bytes()[other]
    # per-step curves of the top-level modules add up to the total curve
    curves = [module_bytes_per_step(g, order, m) for m in ("", "a", "c")]
    assert [sum(c) for c in zip(*curves, strict=True)] == list(prof.total_bytes())
    assert all(x >= y for x, y in zip(curves[1], module_bytes_per_step(g, order, "a.b"),
                                      strict=True))


def test_graph_without_modules_is_all_top_level() -> None:
    from roam_core.model.samples import tiny_train_step

    g = tiny_train_step()
    a = bytes_at_peak_by_module(g)
    assert list(a.own_bytes()) == [""]


def test_info_json_reports_bytes_at_peak_by_module(tmp_path, capsys) -> None:
    p = tmp_path / "named.json"
    g = _named_step()
    save_graph(g, p)
    assert main(["info", str(p), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    bm = d["bytes_at_peak_by_module"]
    assert bm["peak_bytes"] == d["eager_simulated_peak_bytes"]
    assert bm["step"] == d["eager_peak_step"]
    assert sum(bm["top_level"].values()) == bm["peak_bytes"]
    assert sum(bm["modules"].values()) == bm["peak_bytes"]
    assert set(bm["top_level"]) == {"", "a", "b"}
    assert {"a.fc", "b.fc"} <= set(bm["modules"])
    assert bm["modules_by_kind"]["b.fc"]["optimizer_state"] == 2048
    assert main(["info", str(p)]) == 0
    out = capsys.readouterr().out
    assert "by top-level module" in out
    assert "(top level)" in out


@pytest.mark.slow
def test_repeated_blocks_of_zoo_samples() -> None:

    from roam_core.formats.graph_io import load_graph
    from roam_core.oracle.attribution import repeated_blocks

    root = SAMPLE_DIR
    gpt = load_graph(root / "gpt2-b1-t128-steady.json.gz")
    assert repeated_blocks(gpt) == tuple(f"h.{i}" for i in range(12))
    vit = repeated_blocks(load_graph(root / "vit_b_16-b1-roam.json.gz"))
    assert len(vit) == 12
    assert vit[0].endswith(".0")
    assert vit[-1].endswith(".11")
    assert repeated_blocks(_named_step()) == ()
