"""The precision setting of a traced step: what each mode records, and the saved tensors.

The saved-tensor test runs the real step on CPU under
``torch.autograd.graph.saved_tensors_hooks`` and compares every tensor autograd saves for
the backward (deduplicated by storage, residents left out) with the graph's ``activation``
storages: same dtypes and sizes, one for one.
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import roam_core as rc
from roam_core.base.errors import TraceError
from roam_core.model.graph import Phase, TensorKind
from roam_core.trace import trace_fx
from roam_core.trace.precision import PRECISIONS, StepPrecision, resolve_precision
from roam_core.zoo import build_zoo_step


class NormNet(nn.Module):
    """Every normalisation gets a reduced-precision input under autocast."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.ln = nn.Linear(8, 16), nn.LayerNorm(16)
        self.conv, self.bn, self.gn = nn.Conv1d(3, 3, 3, padding=1), nn.BatchNorm1d(3), \
            nn.GroupNorm(1, 3)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = self.ln(F.gelu(self.fc1(x)))
        h = self.gn(self.bn(self.conv(h.view(-1, 3, 16))))
        return F.cross_entropy(self.fc2(h.view(-1, 16)), y)


def _inputs() -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(6, 8, generator=gen), torch.randint(0, 4, (6,), generator=gen)]


def _bytes(graph: rc.Graph, kind: TensorKind) -> Counter[str]:
    out: Counter[str] = Counter()
    for t in graph.tensors.values():
        if t.kind == kind:
            out[t.dtype] += t.size_bytes
    return out


@pytest.mark.slow
def test_each_precision_is_recorded_and_sets_the_dtypes() -> None:
    model, inputs = NormNet(), _inputs()
    graphs = {p: rc.trace_training_step(model, inputs, optimizer="adamw", precision=p)
              for p in PRECISIONS}
    assert {p: g.origin["precision"] for p, g in graphs.items()} == {p: p for p in PRECISIONS}
    fp32 = _bytes(graphs["fp32"], TensorKind.PARAMETER)["float32"]
    state = _bytes(graphs["fp32"], TensorKind.OPTIMIZER_STATE)
    for p in ("fp32", "bf16-mixed", "fp16-mixed"):  # fp32 master weights and AdamW state
        assert _bytes(graphs[p], TensorKind.PARAMETER) == {"float32": fp32}
        assert _bytes(graphs[p], TensorKind.GRADIENT) == {"float32": fp32}
        scaler = {"float32": 4, "int32": 4} if p == "fp16-mixed" else {}  # scale, tracker
        assert _bytes(graphs[p], TensorKind.OPTIMIZER_STATE) == state + Counter(scaler)
    assert _bytes(graphs["bf16"], TensorKind.PARAMETER) == {"bfloat16": fp32 // 2}
    assert _bytes(graphs["bf16"], TensorKind.GRADIENT) == {"bfloat16": fp32 // 2}
    assert "bfloat16" in _bytes(graphs["bf16-mixed"], TensorKind.ACTIVATION)
    assert "float16" in _bytes(graphs["fp16-mixed"], TensorKind.ACTIVATION)
    assert all(p.dtype == torch.float32 for p in model.parameters())  # restored unchanged


def test_an_unknown_precision_names_the_choices() -> None:
    with pytest.raises(TraceError, match=r"unknown precision 'fp8'.*bf16-mixed"):
        rc.trace_training_step(NormNet(), _inputs(), precision="fp8")


def test_the_grad_scaler_is_resident_and_gates_the_update() -> None:
    ts = trace_fx(NormNet(), _inputs(), None, "adamw", precision="fp16-mixed")
    g = ts.graph
    names = [r.name for r in ts.placeholders if r.kind == TensorKind.OPTIMIZER_STATE]
    assert names[-2:] == ["grad_scaler:scale", "grad_scaler:growth_tracker"]
    assert ts.amp is not None
    assert ts.amp.found_inf in g.tensors
    targets = {g.op(op).target for op in ts.amp.step_ops if op in g.op_ids}
    assert "aten.addcdiv_.default" in targets
    for op in ts.amp.step_ops:
        if op in g.op_ids:
            assert ts.amp.found_inf in g.op(op).inputs  # no update before the inf check
            assert g.op(op).phase is Phase.OPTIMIZER
    assert trace_fx(NormNet(), _inputs(), None, "adamw", precision="bf16-mixed").amp is None


def _saved(model: nn.Module, inputs: list[Any], loss_fn: Any,
           precision: str) -> Counter[tuple[str, int]]:
    """(dtype, storage bytes) of every non-resident tensor autograd saves in a real step."""
    prec = resolve_precision(precision)
    model = prec.cast_module(copy.deepcopy(model))
    inputs = [prec.cast(x) for x in inputs]
    resident = {t.untyped_storage().data_ptr() for t in
                [*model.parameters(), *model.buffers(), *inputs]}
    seen: dict[int, tuple[str, int]] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        if s.data_ptr() not in resident:
            seen[s.data_ptr()] = (str(t.dtype).removeprefix("torch."), s.nbytes())
        return t

    mixed = StepPrecision(prec, torch.device("cpu"))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), mixed.autocast():
        out = model(*inputs)
        _ = out if loss_fn is None else loss_fn(out)
    return Counter(seen.values())


def _activations(graph: rc.Graph) -> Counter[tuple[str, int]]:
    return Counter((t.dtype, t.size_bytes) for t in graph.tensors.values()
                   if t.kind == TensorKind.ACTIVATION)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_saved_tensors_match_eager_autocast(precision: str) -> None:
    """Every tensor saved for the backward has the dtype and size eager saves."""
    model, inputs = NormNet(), _inputs()
    g = rc.trace_training_step(model, inputs, optimizer="adamw", precision=precision)
    assert _activations(g) == _saved(model, inputs, None, precision)


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["bf16-mixed", "fp16-mixed"])
def test_saved_tensors_match_eager_autocast_on_a_transformer(precision: str) -> None:
    zs = build_zoo_step("tiny_gpt", 2, 32, device="cpu")
    g = rc.trace_training_step(zs.model, zs.example_inputs, zs.loss_fn, zs.optimizer_factory,
                               precision=precision)
    assert _activations(g) == _saved(zs.model, list(zs.example_inputs), zs.loss_fn,
                                     precision)
