"""Tests of the training-step tracer (tiny models, CPU, fake tensors)."""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from roam_core.base.errors import TraceError  # noqa: E402
from roam_core.model.graph import EdgeReason, Graph, Phase, TensorKind  # noqa: E402
from roam_core.trace import trace_fx, trace_training_step  # noqa: E402


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _bn_model() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.Flatten(), nn.Linear(4 * 6 * 6, 3))


def _dropout_model() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.2), nn.ReLU(), nn.Linear(16, 16),
                         nn.Dropout(0.3), nn.Linear(16, 2))


def _sum_loss(y: torch.Tensor) -> torch.Tensor:
    return y.square().mean()


X = torch.randn(5, 8)
IMG = torch.randn(2, 3, 6, 6)


@pytest.fixture(scope="module")
def mlp_adamw():
    return trace_fx(_mlp(), [X], _sum_loss)


# ------------------------------------------------------------------ helpers
def _versions(g: Graph, order) -> dict[tuple[str, str], int]:
    """For every (op, storage) access: how many writes of the storage came before."""
    writes: dict[str, int] = {}
    seen: dict[tuple[str, str], int] = {}
    for op_id in order:
        op = g.op(op_id)
        for s in g.storages_read(op_id):
            seen[(op_id, s)] = writes.get(s, 0)
        for s in op.mutates:
            writes[s] = writes.get(s, 0) + 1
    return seen


def _random_topo_order(g: Graph, rng: random.Random) -> list[str]:
    indeg = {o: len(g.predecessors(o)) for o in g.op_ids}
    ready = [o for o, d in indeg.items() if d == 0]
    order = []
    while ready:
        o = ready.pop(rng.randrange(len(ready)))
        order.append(o)
        for s in g.successors(o):
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    assert len(order) == len(g.op_ids), "cycle"
    return order


def _assert_reorder_safe(g: Graph, n_orders: int = 20) -> None:
    """Every order honouring the edges reads the same write versions and keeps RNG order."""
    base = _versions(g, g.op_ids)
    rand_base = [o for o in g.op_ids if g.op(o).random]
    rng = random.Random(0)
    for _ in range(n_orders):
        order = _random_topo_order(g, rng)
        assert _versions(g, order) == base
        assert [o for o in order if g.op(o).random] == rand_base


def _val(ts, value_id):
    ref = ts.values[value_id]
    node = next(n for n in ts.gm.graph.nodes if n.name == ref.op)
    v = node.meta["val"]
    return v if ref.index is None else v[ref.index]


# ------------------------------------------------------------------ tests
def test_storage_sizes_equal_fake_storage_bytes(mlp_adamw) -> None:
    ts = mlp_adamw
    assert ts.graph.tensors
    for sid, t in ts.graph.tensors.items():
        v = _val(ts, sid)
        if isinstance(v, torch.Tensor):
            assert t.size_bytes == v.untyped_storage().nbytes(), sid
            assert t.shape == tuple(v.shape)
        else:
            assert t.size_bytes == 0
            assert t.dtype == "scalar"


def test_ids_map_to_fx_nodes(mlp_adamw) -> None:
    ts = mlp_adamw
    names = {n.name for n in ts.gm.graph.nodes}
    assert all(op.id in names for op in ts.graph.ops)
    for vid, ref in ts.values.items():
        assert ref.op in names
        assert ref.fx_node is None or ref.fx_node in names
        if ref.fx_node is not None and ref.fx_node != ref.op:
            assert vid == ref.fx_node  # multi-output elements are named after their getitem
    assert [p.node for p in ts.placeholders] == [
        n.name for n in ts.gm.graph.nodes if n.op == "placeholder"]
    kinds = [p.kind for p in ts.placeholders]
    assert kinds == sorted(kinds, key=[TensorKind.PARAMETER, TensorKind.BUFFER,
                                        TensorKind.OPTIMIZER_STATE, TensorKind.INPUT].index)
    assert ts.placeholders[0].name == "0.weight"


def test_acyclic_single_loss_and_phases(mlp_adamw) -> None:
    g = mlp_adamw.graph
    assert len(_random_topo_order(g, random.Random(1))) == len(g)
    (loss_sid,) = g.outputs
    assert g.tensors[loss_sid].kind is TensorKind.OUTPUT
    assert g.tensors[loss_sid].size_bytes == 4
    producers = [op for op in g.ops if loss_sid in g.storages_created(op.id)]
    assert len(producers) == 1
    assert producers[0].phase is Phase.LOSS
    assert sum(t.kind is TensorKind.OUTPUT for t in g.tensors.values()) == 1
    assert {op.phase for op in g.ops} >= {Phase.FORWARD, Phase.LOSS, Phase.BACKWARD,
                                          Phase.OPTIMIZER}
    # phases come in program order: forward < loss < backward < optimizer
    rank = [Phase.FORWARD, Phase.LOSS, Phase.BACKWARD, Phase.OPTIMIZER, Phase.OTHER]
    ranks = [rank.index(op.phase) for op in g.ops]
    assert ranks == sorted(ranks)


def test_kinds_of_mlp_step(mlp_adamw) -> None:
    g = mlp_adamw.graph
    by_kind: dict[TensorKind, list] = {}
    for t in g.tensors.values():
        by_kind.setdefault(t.kind, []).append(t)
    assert len(by_kind[TensorKind.PARAMETER]) == 4
    assert len(by_kind[TensorKind.GRADIENT]) == 4
    assert all(t.producer is not None for t in by_kind[TensorKind.GRADIENT])
    assert len(by_kind[TensorKind.INPUT]) == 1
    assert by_kind[TensorKind.ACTIVATION]
    # steady: AdamW state (exp_avg, exp_avg_sq, step) is resident, per parameter
    state = by_kind[TensorKind.OPTIMIZER_STATE]
    assert len(state) == 12
    assert all(t.resident for t in state)


def test_mutation_edges_for_optimizer_updates(mlp_adamw) -> None:
    g = mlp_adamw.graph
    params = {s for s, t in g.tensors.items() if t.kind is TensorKind.PARAMETER}
    writers = [op for op in g.ops if set(op.mutates) & params]
    assert writers
    assert all(op.phase is Phase.OPTIMIZER for op in writers)
    # per-parameter update ops: no op writes two parameters
    assert all(len(set(op.mutates) & params) == 1 for op in writers)
    mut = [e for e in g.control_edges if e.reason is EdgeReason.MUTATION]
    assert any(g.op(e.src).phase is Phase.FORWARD and g.op(e.dst) in writers for e in mut)
    _assert_reorder_safe(g)


def test_batchnorm_running_stats_are_mutations() -> None:
    ts = trace_fx(_bn_model(), [IMG], _sum_loss, "sgd")
    g = ts.graph
    buffers = {p.node: p.name for p in ts.placeholders if p.kind is TensorKind.BUFFER}
    bn = [op for op in g.ops if op.target == "aten.native_batch_norm.default"]
    assert len(bn) == 1
    assert {buffers[s] for s in bn[0].mutates} == {"1.running_mean", "1.running_var"}
    # num_batches_tracked += 1 is an in-place write on a buffer as well
    assert any("1.num_batches_tracked" == buffers.get(s) for op in g.ops for s in op.mutates)
    _assert_reorder_safe(g)
    # SGD momentum state is resident in the steady setting
    assert sum(t.kind is TensorKind.OPTIMIZER_STATE for t in g.tensors.values()) == 6


def test_rng_chain_for_dropout() -> None:
    g = trace_training_step(_dropout_model(), [X], _sum_loss, "adam")
    rand = [op.id for op in g.ops if op.random]
    assert len(rand) == 2
    assert any(e.reason is EdgeReason.RNG and (e.src, e.dst) == tuple(rand)
               for e in g.control_edges)
    _assert_reorder_safe(g)


def test_meta_model_gives_the_same_graph_as_a_real_one() -> None:
    real = trace_training_step(_mlp(), [X], _sum_loss)
    with torch.device("meta"):
        meta_model = _mlp()
    meta = trace_training_step(meta_model, [torch.empty(5, 8, device="meta")], _sum_loss)
    assert meta.fingerprint() == real.fingerprint()


def test_model_is_restored_and_nothing_real_is_allocated() -> None:
    m = _mlp()
    before = list(m.parameters())
    w = before[0].detach().clone()
    trace_training_step(m, [X], _sum_loss, "adamw")
    after = list(m.parameters())
    assert all(a is b for a, b in zip(before, after, strict=True))
    assert torch.equal(after[0].detach(), w)
    assert after[0].grad is None


def test_loss_fn_none_model_returns_loss() -> None:
    class WithLoss(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(8, 3)

        def forward(self, x, y):
            return F.cross_entropy(self.lin(x), y)

    g = trace_training_step(WithLoss(), [X, torch.zeros(5, dtype=torch.long)], None, "sgd")
    (loss_sid,) = g.outputs
    producer = g.tensors[loss_sid].producer
    assert g.op(producer).phase is Phase.LOSS
    assert g.op(producer).target.startswith("aten.nll_loss_forward")


def test_custom_loss_fn_ops_are_loss_phase() -> None:
    g = trace_training_step(_mlp(), [X], lambda y: F.cross_entropy(y, torch.zeros_like(y)))
    loss_ops = [op.target for op in g.ops if op.phase is Phase.LOSS]
    assert "aten.zeros_like.default" in loss_ops
    assert len(loss_ops) >= 3


def test_roam_setting_creates_state_inside_the_step() -> None:
    steady = trace_training_step(_mlp(), [X], _sum_loss, setting="steady")
    roam = trace_training_step(_mlp(), [X], _sum_loss, setting="roam")
    st = [t for t in steady.tensors.values() if t.kind is TensorKind.OPTIMIZER_STATE]
    ro = [t for t in roam.tensors.values() if t.kind is TensorKind.OPTIMIZER_STATE]
    assert st
    assert all(t.resident for t in st)
    assert len(ro) == len(st)
    assert not any(t.resident for t in ro)
    assert any(roam.op(t.producer).target == "aten.zeros_like.default" for t in ro)
    assert all(roam.op(t.producer).phase is Phase.OPTIMIZER for t in ro)
    _assert_reorder_safe(roam)


def test_origin_and_name() -> None:
    g = trace_training_step(_mlp(), [X], _sum_loss, "sgd", name="toy")
    assert g.name == "toy"
    assert g.origin["source"] == "custom"
    assert g.origin["optimizer"] == "sgd"
    assert g.origin["input_shapes"] == [[5, 8]]


def test_failures_become_trace_errors() -> None:
    class Broken(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(8, 3)

        def forward(self, x):
            return self.lin(x) @ torch.ones(4, 4)  # shape mismatch

    with pytest.raises(TraceError, match="Broken"):
        trace_training_step(Broken(), [X], _sum_loss)
    with pytest.raises(TraceError, match="one element"):
        trace_training_step(_mlp(), [X], lambda y: y)
    with pytest.raises(TraceError, match="unknown optimizer"):
        trace_training_step(_mlp(), [X], _sum_loss, "lion")
    with pytest.raises(TraceError, match="unknown setting"):
        trace_training_step(_mlp(), [X], _sum_loss, setting="warm")


def test_optimizer_factory_and_hyper_parameters() -> None:
    g1 = trace_training_step(_mlp(), [X], _sum_loss,
                             lambda ps: torch.optim.SGD(ps, lr=0.1, foreach=False))
    assert g1.origin["optimizer"] == "custom"
    assert not any(t.kind is TensorKind.OPTIMIZER_STATE for t in g1.tensors.values())
    g2 = trace_training_step(_mlp(), [X], _sum_loss, "sgd", momentum=0.0)
    assert len(g2) < trace_training_step(_mlp(), [X], _sum_loss, "sgd").__len__()


def test_tied_weights_share_one_parameter_and_gradient() -> None:
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(10, 4)
            self.out = nn.Linear(4, 10, bias=False)
            self.out.weight = self.emb.weight

        def forward(self, ids):
            return self.out(self.emb(ids))

    g = trace_training_step(Tied(), [torch.zeros(2, 3, dtype=torch.long)], _sum_loss)
    assert sum(t.kind is TensorKind.PARAMETER for t in g.tensors.values()) == 1
    assert sum(t.kind is TensorKind.GRADIENT for t in g.tensors.values()) == 1


def test_scalar_values_read_later_keep_their_data_edge() -> None:
    # make_fx cannot record a data-dependent .item() on fakes, so build the FX graph by hand
    from torch._subclasses.fake_tensor import FakeTensorMode

    from roam_core.trace.fx_graph import build_graph

    aten = torch.ops.aten
    with FakeTensorMode():
        x = torch.empty(4)
        y = x * 2
    fx = torch.fx.Graph()
    p = fx.placeholder("x")
    p.meta["val"] = x
    item = fx.call_function(aten._local_scalar_dense.default, (p,))
    item.meta["val"] = None
    mul = fx.call_function(aten.mul.Tensor, (p, item))
    mul.meta["val"] = y
    fx.output([mul])
    gm = torch.fx.GraphModule(torch.nn.Module(), fx)
    g, values, loss = build_graph(gm, {}, {"x": TensorKind.INPUT}, [], [], name="s",
                                   origin={"source": "custom"})
    assert g.tensors[item.name].dtype == "scalar"
    assert g.tensors[item.name].size_bytes == 0
    assert g.predecessors(mul.name) == (item.name,)
    assert loss == mul.name
    assert values[item.name].fx_node == item.name


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU guard")
def test_cuda_without_gpu_is_a_clear_error() -> None:
    with pytest.raises(TraceError, match="CUDA GPU"):
        trace_fx(_mlp(), [X], _sum_loss, device="cuda")


@pytest.mark.slow
def test_zoo_graphs_are_reorder_safe() -> None:
    from roam_core.zoo import trace_zoo

    _assert_reorder_safe(trace_zoo("tiny_gpt", 2, 8, "steady").graph, n_orders=5)
    _assert_reorder_safe(trace_zoo("residual_block", 2, setting="roam").graph, n_orders=5)


def test_loss_fn_may_close_over_real_labels() -> None:
    """Labels captured by the loss function (real tensors) become resident constants."""
    import torch
    from torch import nn

    from roam_core.model.graph import TensorKind
    from roam_core.trace import trace_training_step

    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    labels = torch.randint(0, 4, (5,))
    graph = trace_training_step(model, [torch.randn(5, 8)],
                                lambda out: nn.functional.cross_entropy(out, labels))
    constants = [t for t in graph.tensors.values()
                 if t.resident and t.kind == TensorKind.BUFFER and t.dtype.endswith("int64")]
    assert [t.size_bytes for t in constants] == [labels.numel() * 8]


def test_gc_is_paused_while_tracing_and_restored_after() -> None:
    import gc

    from roam_core.trace import gc_paused

    seen: list[bool] = []

    def loss(y: torch.Tensor) -> torch.Tensor:
        seen.append(gc.isenabled())
        return y.sum()

    assert gc.isenabled()
    trace_training_step(_mlp(), [X], loss_fn=loss, optimizer="sgd")
    assert seen == [False]
    assert gc.isenabled()
    with pytest.raises(TraceError):  # restored on errors too
        trace_training_step(_mlp(), [X], loss_fn=lambda y: y, optimizer="sgd")
    assert gc.isenabled()
    gc.disable()
    try:  # a caller's own pause is left alone
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.slow
@pytest.mark.parametrize("opt", ["adamw", "adam", "sgd"])
def test_steady_warm_step_on_meta_twins_gives_the_fake_steps_trace(opt: str) -> None:
    from roam_core.formats.graph_io import graph_to_dict
    from roam_core.trace import make_optimizer_factory
    from roam_core.zoo import build_zoo_step

    _, factory = make_optimizer_factory(opt, "steady", weight_decay=0.01)

    def trace(f: object) -> tuple[object, ...]:
        step = build_zoo_step("tiny_gpt", 2, 16, "steady", opt, "meta")
        s = trace_fx(step.model, step.example_inputs, step.loss_fn, f, setting="steady")
        state = [(r.name, s.gm.graph.find_nodes(op="placeholder")[i].meta["val"].shape)
                 for i, r in enumerate(s.placeholders)]
        g = graph_to_dict(s.graph)
        g["control_edges"].sort(key=lambda e: (e["src"], e["dst"], e["reason"]))
        return g, str(s.gm.graph), state

    meta = trace(factory)
    fake = trace(lambda ps: factory(ps))  # a user's factory: the warm step runs on fakes
    assert meta == fake
    assert any("exp_avg" in n or "momentum_buffer" in n for n, _ in meta[2])
