"""Module attribution in the tracer: ``Op.module`` and ``Tensor.name``, and the graph file."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from roam_core.formats.graph_io import (  # noqa: E402
    dumps_graph,
    graph_to_dict,
    load_graph,
    loads_graph,
)
from roam_core.model.graph import Phase, TensorKind  # noqa: E402
from roam_core.trace import trace_fx  # noqa: E402
from tests.paths import DATA_DIR  # noqa: E402

OLD_FILE = DATA_DIR / "mlp-b8-steady.v1.json.gz"


class _Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 32)
        self.proj = nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x)))


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(8)
        self.mlp = _Mlp()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(self.ln(x))


class _Net(nn.Module):
    def __init__(self, n: int = 2, checkpoint: bool = False) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(_Block() for _ in range(n))
        self.norm = nn.BatchNorm1d(8)
        self.head = nn.Linear(8, 3)
        self.checkpoint = checkpoint

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            if self.checkpoint:
                x = torch.utils.checkpoint.checkpoint(b, x, use_reentrant=False)
            else:
                x = b(x)
        return self.head(self.norm(x))


def _loss(y: torch.Tensor) -> torch.Tensor:
    return y.square().mean()


X = torch.randn(4, 8)


@pytest.fixture(scope="module")
def net_step():
    model = _Net()
    return model, trace_fx(model, [X], _loss)


def _ops(g, phase, target=None, module=None):
    return [op for op in g.ops if op.phase is phase
            and (target is None or op.target == target)
            and (module is None or op.module == module)]


@pytest.mark.slow
def test_forward_ops_record_their_module(net_step) -> None:
    model, ts = net_step
    g = ts.graph
    # the tracer's hooks are gone afterwards
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())
    fwd = {op.module for op in _ops(g, Phase.FORWARD)}
    assert {"blocks.0.mlp.fc", "blocks.0.mlp.proj", "blocks.0.ln", "blocks.1.mlp.fc",
            "norm", "head"} <= fwd
    # the addmm of each Linear sits in that Linear; the gelu between them in the mlp
    for path in ("blocks.0.mlp.fc", "blocks.1.mlp.proj", "head"):
        assert len(_ops(g, Phase.FORWARD, "aten.addmm.default", path)) == 1
    assert _ops(g, Phase.FORWARD, "aten.gelu.default", "blocks.0.mlp")
    # the residual add belongs to the block, the loss to the top level
    assert _ops(g, Phase.FORWARD, "aten.add.Tensor", "blocks.1")
    assert {op.module for op in _ops(g, Phase.LOSS)} == {""}


def test_backward_ops_map_to_their_forward_module(net_step) -> None:
    _, ts = net_step
    g = ts.graph
    # a Linear's backward: two matmuls (input grad, weight grad) in that Linear
    for path in ("blocks.0.mlp.fc", "blocks.1.mlp.proj", "head"):
        mms = _ops(g, Phase.BACKWARD, "aten.mm.default", path)
        assert len(mms) == 2 if path != "blocks.0.mlp.fc" else len(mms) >= 1, (path, mms)
    assert _ops(g, Phase.BACKWARD, "aten.gelu_backward.default", "blocks.0.mlp")
    assert _ops(g, Phase.BACKWARD, "aten.native_layer_norm_backward.default", "blocks.1.ln")
    assert _ops(g, Phase.BACKWARD, "aten.native_batch_norm_backward.default", "norm")
    # every backward op that produces a parameter's gradient sits in that parameter's module
    for t in g.tensors.values():
        if t.kind is TensorKind.GRADIENT:
            param = t.name.removesuffix(".grad")
            assert g.op(t.producer).module == param.rpartition(".")[0], t.name
    # only the loss's own backward (and the engine's seed) is at the top level
    top = {op.target for op in _ops(g, Phase.BACKWARD) if op.module == ""}
    assert top <= {"aten.ones_like.default", "aten.expand.default", "aten.div.Scalar",
                   "aten.pow.Tensor_Scalar", "aten.mul.Scalar", "aten.mul.Tensor"}, top


def test_tensor_names_are_named_parameters_and_buffers(net_step) -> None:
    model, ts = net_step
    g = ts.graph
    by_kind: dict[TensorKind, set[str]] = {}
    for t in g.tensors.values():
        if t.name is not None:
            by_kind.setdefault(t.kind, set()).add(t.name)
    assert by_kind[TensorKind.PARAMETER] == {n for n, _ in model.named_parameters()}
    assert by_kind[TensorKind.BUFFER] >= {n for n, _ in model.named_buffers()}
    assert by_kind[TensorKind.GRADIENT] == {f"{n}.grad" for n, _ in model.named_parameters()}
    # steady AdamW: step, exp_avg, exp_avg_sq per parameter, resident
    assert by_kind[TensorKind.OPTIMIZER_STATE] == {
        f"{n}.{k}" for n, _ in model.named_parameters()
        for k in ("step", "exp_avg", "exp_avg_sq")}
    assert by_kind[TensorKind.INPUT] == {"inputs[0]"}
    # activations and temporaries carry no name
    assert all(t.name is None for t in g.tensors.values()
               if t.kind in (TensorKind.ACTIVATION, TensorKind.TEMPORARY))


def test_optimizer_ops_belong_to_their_parameters_module(net_step) -> None:
    _, ts = net_step
    g = ts.graph
    opt = _ops(g, Phase.OPTIMIZER)
    assert opt
    assert all(op.module for op in opt)
    names = {t.id: t.name for t in g.tensors.values()}
    for op in opt:
        for s in op.mutates:
            if names.get(s):
                owner = names[s].rpartition(".")[0]
                if g.tensors[s].kind is TensorKind.OPTIMIZER_STATE:
                    owner = owner.rpartition(".")[0]
                assert op.module == owner, (op.id, names[s])


def test_roam_setting_names_state_created_in_the_step() -> None:
    model = _Net(1)
    g = trace_fx(model, [X], _loss, setting="roam").graph
    state = {t.name for t in g.tensors.values() if t.kind is TensorKind.OPTIMIZER_STATE}
    assert state == {f"{n}.{k}" for n, _ in model.named_parameters()
                     for k in ("step", "exp_avg", "exp_avg_sq")}
    created = [t for t in g.tensors.values()
               if t.kind is TensorKind.OPTIMIZER_STATE and t.producer is not None]
    assert created
    for t in created:
        param = t.name.rpartition(".")[0]
        assert g.op(t.producer).module == param.rpartition(".")[0]


def test_sgd_momentum_buffer_names() -> None:
    model = _Net(1)
    g = trace_fx(model, [X], _loss, optimizer="sgd").graph
    state = {t.name for t in g.tensors.values() if t.kind is TensorKind.OPTIMIZER_STATE}
    assert state == {f"{n}.momentum_buffer" for n, _ in model.named_parameters()}


def test_tied_weight_has_its_first_name_and_module() -> None:
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(10, 8)
            self.out = nn.Linear(8, 10, bias=False)
            self.out.weight = self.emb.weight

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.out(self.emb(ids))

    model = Tied()
    g = trace_fx(model, [torch.zeros(2, 3, dtype=torch.long)], lambda y: y.sum()).graph
    params = [t for t in g.tensors.values() if t.kind is TensorKind.PARAMETER]
    assert [t.name for t in params] == ["emb.weight"] == [n for n, _ in model.named_parameters()]
    assert _ops(g, Phase.FORWARD, "aten.embedding.default", "emb")
    assert _ops(g, Phase.FORWARD, module="out")
    assert _ops(g, Phase.BACKWARD, "aten.embedding_dense_backward.default", "emb")


def test_checkpointed_blocks_recompute_in_their_module() -> None:
    g = trace_fx(_Net(2, checkpoint=True), [X], _loss).graph
    # the recomputed forward of each block runs in the backward phase, in its own modules
    for i in (0, 1):
        assert len(_ops(g, Phase.BACKWARD, "aten.addmm.default", f"blocks.{i}.mlp.fc")) == 1
        assert len(_ops(g, Phase.BACKWARD, "aten.gelu.default", f"blocks.{i}.mlp")) == 1
        # and the backward of the block after it, in the forward modules
        assert _ops(g, Phase.BACKWARD, "aten.gelu_backward.default", f"blocks.{i}.mlp")
        assert _ops(g, Phase.BACKWARD, "aten.mm.default", f"blocks.{i}.mlp.fc")
        assert _ops(g, Phase.BACKWARD, "aten.native_layer_norm_backward.default",
                    f"blocks.{i}.ln")


def test_wrapper_scope_strips_the_wrapper_prefix() -> None:
    class Wrap(nn.Module):
        roam_name_scope = "model"

        def __init__(self, model: nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return _loss(self.model(x))

    inner = _Net(1)
    g = trace_fx(Wrap(inner), [X]).graph
    params = {t.name for t in g.tensors.values() if t.kind is TensorKind.PARAMETER}
    assert params == {n for n, _ in inner.named_parameters()}
    assert _ops(g, Phase.BACKWARD, "aten.mm.default", "blocks.0.mlp.proj")
    assert not any(op.module.startswith("model") for op in g.ops)


@pytest.mark.slow
def test_zoo_gpt_module_names() -> None:
    from roam_core.zoo import trace_zoo

    g = trace_zoo("tiny_gpt", 1, 8, "steady").graph
    mods = {op.module for op in g.ops}
    assert "h.0.attn" in mods or any(m.startswith("h.0.") for m in mods), sorted(mods)
    names = {t.name for t in g.tensors.values() if t.kind is TensorKind.PARAMETER}
    assert "wte.weight" in names


# ------------------------------------------------------------------ graph file
def test_module_and_name_roundtrip_and_leave_the_fingerprint(net_step) -> None:
    _, ts = net_step
    g = ts.graph
    d = graph_to_dict(g)
    assert d["schema_version"] == 2
    assert all("module" in o for o in d["ops"])
    assert all("name" in t for t in d["tensors"])
    back = loads_graph(dumps_graph(g, compress=True))
    assert [op.module for op in back.ops] == [op.module for op in g.ops]
    assert {t.id: t.name for t in back.tensors.values()} == {
        t.id: t.name for t in g.tensors.values()}
    # labels for people do not enter the planning identity
    for o in d["ops"]:
        o["module"] = ""
    for t in d["tensors"]:
        t["name"] = None
    assert loads_graph(json.dumps(d)).fingerprint() == g.fingerprint()


def test_old_version_1_file_still_loads_with_the_same_fingerprint() -> None:
    old = load_graph(OLD_FILE)
    assert all(op.module == "" for op in old.ops)
    assert all(t.name is None for t in old.tensors.values())
    from roam_core.zoo import trace_zoo

    o = old.origin
    new = trace_zoo(o["model"], o["batch_size"], o["seq_len"], o["setting"]).graph
    assert new.fingerprint() == old.fingerprint()
    assert any(op.module for op in new.ops)


def test_bad_module_field_is_a_clear_error() -> None:
    from roam_core.base.errors import GraphError

    d = graph_to_dict(load_graph(OLD_FILE))
    d["ops"][0]["module"] = 3
    with pytest.raises(GraphError, match="module"):
        loads_graph(json.dumps(d))
    d["ops"][0]["module"] = ""
    d["tensors"][0]["name"] = ["x"]
    with pytest.raises(GraphError, match="name"):
        loads_graph(json.dumps(d))


@pytest.mark.slow
def test_hugging_face_gpt2_names_are_its_own() -> None:
    pytest.importorskip("transformers")
    from roam_core.zoo.hf import hf_model_from_config, trace_hf

    cfg = {"n_layer": 2, "n_embd": 32, "n_head": 2, "vocab_size": 64, "n_positions": 16}
    g = trace_hf("gpt2", 1, 8, **cfg).graph
    hf = hf_model_from_config("gpt2", "causal-lm", **cfg)
    params = {t.name for t in g.tensors.values() if t.kind is TensorKind.PARAMETER}
    assert params == {n for n, _ in hf.named_parameters()}
    assert "transformer.h.1.attn.c_attn.weight" in params
    grads = {t.name for t in g.tensors.values() if t.kind is TensorKind.GRADIENT}
    assert "transformer.h.1.attn.c_attn.weight.grad" in grads
    # HF's Conv1D runs addmm forward and two mms backward inside the projection
    assert _ops(g, Phase.FORWARD, "aten.addmm.default", "transformer.h.1.attn.c_attn")
    assert len(_ops(g, Phase.BACKWARD, "aten.mm.default", "transformer.h.1.attn.c_attn")) == 2


def test_hooks_are_removed_when_tracing_fails() -> None:
    from roam_core.base.errors import TraceError

    class Bad(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("boom")

    model = Bad()
    with pytest.raises(TraceError, match="boom"):
        trace_fx(model, [X], _loss)
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())
