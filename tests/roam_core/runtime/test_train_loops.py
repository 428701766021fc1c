"""PlannedStep in the loops people write: gradient accumulation, clipping, batches of several
shapes (planned on first use, cached on disk), foreach optimizers, padding to buckets; each
bit-equal with the eager loop on CPU or refused before anything changes."""

from __future__ import annotations

import copy
import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from roam_core.base.errors import ConfigError, ExecutorError
from roam_core.model.graph import TensorKind
from roam_core.runtime import (
    BatchMismatchError,
    NewShapeWarning,
    PlannedStep,
    StepMismatchError,
    bucket_length,
    pad_to_bucket,
)
from roam_core.trace import make_optimizer_factory, trace_fx
from roam_core.trace.step_spec import StepSpec
from tests.roam_core.runtime.train_helpers import (
    DropNet,
    EagerLoop,
    assert_same_training,
    batches,
    fast_planner,
    snapshot,
    unchanged,
)


def _ex(n: int = 6) -> list[torch.Tensor]:
    return [torch.zeros(n, 12), torch.zeros(n, dtype=torch.long)]


def _pair(optimizer="adamw", *, planner=None, cache=False, model=None, **kw):
    torch.manual_seed(0)
    model = model or DropNet()
    eager = copy.deepcopy(model)
    factory = optimizer if callable(optimizer) else make_optimizer_factory(optimizer)[1]
    step = PlannedStep(model, None, optimizer=factory, example_inputs=_ex(),
                       planner=planner or fast_planner(), plan_cache=cache, **kw)
    loop = EagerLoop(eager, factory, **{k: v for k, v in kw.items()
                                        if k in ("max_grad_norm", "accumulation_steps")})
    return model, step, eager, loop


def _train(step, loop, data, seed=100):
    for i, b in enumerate(data):
        torch.manual_seed(seed + i)
        le = loop(*b)
        torch.manual_seed(seed + i)
        assert torch.equal(step(*b), le), f"loss {i} differs"


# ------------------------------------------------------------------ accumulation
@pytest.mark.slow
def test_accumulation_equals_the_eager_accumulation_loop() -> None:
    model, step, eager, loop = _pair(accumulation_steps=3)
    data = batches(_ex(), 9, 1, 5)
    before = model.fc1.weight.detach().clone()
    _train(step, loop, data[:2])
    assert torch.equal(model.fc1.weight, before)  # two micro-batches: no update yet
    assert step.micro_batch == 2
    _train(step, loop, data[2:], seed=102)
    assert step.micro_batch == 0
    assert_same_training(eager, model, loop.opt, step.optimizer)
    assert float(next(iter(step.optimizer.state.values()))["step"]) == 3
    # the accumulators are resident gradient storages of both graphs; the update graph
    # adds into them, clips nothing here, and resets them to -0.0
    for v in step.variants.values():
        g = v.traced.graph
        accs = [t for t in g.tensors.values() if t.kind is TensorKind.GRADIENT and t.resident]
        assert len(accs) == 4
        assert all(t.name.endswith(".grad_accumulator") for t in accs)
    update = next(v for v in step.variants.values() if v.updates)
    fills = [n for n in update.traced.gm.graph.nodes if n.target is torch.ops.aten.fill_.Scalar]
    assert fills
    assert all(str(n.args[1]) == "-0.0" for n in fills)


@pytest.mark.slow
def test_accumulation_with_clipping_and_a_shape_change_mid_accumulation() -> None:
    model, step, eager, loop = _pair(accumulation_steps=2, max_grad_norm=0.02)
    a, b = batches(_ex(), 4, 2, 5), batches(_ex(3), 2, 3, 5)
    data = [a[0], b[0], a[1], a[2], b[1], a[3]]  # shapes change inside an accumulation
    with pytest.warns(NewShapeWarning):
        _train(step, loop, data)
    assert_same_training(eager, model, loop.opt, step.optimizer)
    assert torch.equal(step.last_grad_norm, loop.last_grad_norm)
    assert {(k.phase, k.shapes[0][0]) for k in step.variants} == {
        ("accumulate", (6, 12)), ("update", (6, 12)), ("accumulate", (3, 12)),
        ("update", (3, 12))}


@pytest.mark.slow
@pytest.mark.parametrize("set_to_none", [True, False])
def test_zero_grad_between_micro_batches_drops_the_partial_sums_as_eager(set_to_none) -> None:
    model, step, eager, loop = _pair(accumulation_steps=3)
    data = batches(_ex(), 6, 4, 5)
    _train(step, loop, data[:2])
    model.zero_grad(set_to_none=set_to_none)
    loop.opt.zero_grad(set_to_none=set_to_none)
    _train(step, loop, data[2:4], seed=102)
    _train(step, loop, data[4:], seed=104)
    assert_same_training(eager, model, loop.opt, step.optimizer)


def test_a_hand_set_gradient_is_refused() -> None:
    model, step, _, _ = _pair()
    step(*_ex())
    model.fc1.weight.grad = torch.ones_like(model.fc1.weight)
    snap = snapshot(model, step.optimizer)
    with pytest.raises(StepMismatchError, match=r"'fc1.weight' has a .grad assigned by hand"):
        step(*_ex())
    assert unchanged(model, step.optimizer, snap)


def test_trace_accumulate_only_needs_accumulation() -> None:
    from roam_core.base.errors import TraceError

    with pytest.raises(TraceError, match="accumulation_steps > 1"):
        StepSpec(accumulation_steps=1, updates=False)
    with pytest.raises(TraceError, match="max_grad_norm"):
        StepSpec(max_grad_norm=-1.0)
    with pytest.raises(TraceError, match="accumulation_steps"):
        StepSpec(accumulation_steps=0)


# ------------------------------------------------------------------ shapes and the cache
@pytest.mark.slow
def test_new_shapes_are_planned_once_and_cached_on_disk(tmp_path) -> None:
    planner = fast_planner()
    model, step, eager, loop = _pair(planner=planner, cache=tmp_path)
    small = batches(_ex(4), 2, 5, 5)
    with pytest.warns(NewShapeWarning, match=r"batch \(4, 12\) float32.*in [0-9.]+ s"):
        _train(step, loop, small[:1])
    _train(step, loop, small[1:] + batches(_ex(), 1, 6, 5), seed=200)
    assert_same_training(eager, model, loop.opt, step.optimizer)
    assert len(planner.calls) == 2  # the first shape at set-up, (4, 12) once
    files = sorted(tmp_path.glob("*.plan.json"))
    assert len(files) == 2
    assert all(json.loads(f.read_text())["format"] == "roam-plan" for f in files)
    assert not list(tmp_path.glob("*.tmp"))  # atomic writes leave nothing behind
    # a new run starts from the cache: nothing is planned
    again = fast_planner()
    torch.manual_seed(0)
    step2 = PlannedStep(DropNet(), None, optimizer="adamw", example_inputs=_ex(),
                        planner=again, plan_cache=tmp_path, on_new_shape="error")
    step2(*small[0])
    assert again.calls == []
    assert {v.how for v in step2.variants.values()} == {"cache"}


@pytest.mark.slow
def test_a_corrupt_cache_file_is_planned_again(tmp_path) -> None:
    planner = fast_planner()
    _pair(planner=planner, cache=tmp_path)
    (path,) = tmp_path.glob("*.plan.json")
    path.write_text('{"format": "roam-plan", "schema_version": 2}')
    again = fast_planner()
    torch.manual_seed(0)
    PlannedStep(DropNet(), None, optimizer="adamw", example_inputs=_ex(), planner=again,
                plan_cache=tmp_path)
    assert len(again.calls) == 1
    assert json.loads(path.read_text())["order"]


@pytest.mark.slow
def test_on_new_shape_error_refuses_unplanned_shapes() -> None:
    model, step, _, _ = _pair(on_new_shape="error")
    snap = snapshot(model, step.optimizer)
    with pytest.raises(BatchMismatchError, match=r"batch \(5, 12\).*on_new_shape='error'"):
        step(*_ex(5))
    assert unchanged(model, step.optimizer, snap)
    with pytest.raises(ConfigError, match="on_new_shape"):
        PlannedStep(DropNet(), None, on_new_shape="sometimes")


@pytest.mark.slow
def test_prepare_plans_a_shape_without_training() -> None:
    model, step, _, _ = _pair(accumulation_steps=2)
    snap = snapshot(model, step.optimizer)
    step.prepare(*_ex(3))
    assert len(step.variants) == 4
    assert unchanged(model, step.optimizer, snap)
    assert step.calls == 0


@pytest.mark.slow
def test_lr_scheduler_is_followed_across_shapes() -> None:
    model, step, eager, loop = _pair()
    sched_e = torch.optim.lr_scheduler.StepLR(loop.opt, 1, gamma=0.5)
    sched_p = torch.optim.lr_scheduler.StepLR(step.optimizer, 1, gamma=0.5)
    data = batches(_ex(), 2, 7, 5) + batches(_ex(3), 2, 8, 5)
    for i, b in enumerate([data[0], data[2], data[1], data[3]]):
        with pytest.warns(NewShapeWarning) if i == 1 else _nothing():
            _train(step, loop, [b], seed=300 + i)
        sched_e.step()
        sched_p.step()
    assert_same_training(eager, model, loop.opt, step.optimizer)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


# ------------------------------------------------------------------ optimizers
@pytest.mark.slow
@pytest.mark.parametrize("factory", [
    lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1, foreach=True),
    lambda p: torch.optim.Adam(p, lr=1e-2, amsgrad=True, foreach=True),
    lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, foreach=True),
], ids=["adamw", "adam-amsgrad", "sgd-nesterov"])
def test_foreach_optimizers_run_per_parameter_bit_equal(factory) -> None:
    model, step, eager, loop = _pair(factory)
    assert step.optimizer.param_groups[0]["foreach"] is True  # the user's optimizer as built
    _train(step, loop, batches(_ex(), 3, 9, 5))
    assert_same_training(eager, model, loop.opt, step.optimizer)


@pytest.mark.slow
def test_a_hyper_parameter_that_changes_the_code_path_is_refused_and_undone() -> None:
    model, step, eager, loop = _pair(
        lambda p: torch.optim.Adam(p, lr=1e-2, weight_decay=0.01, foreach=False))
    data = batches(_ex(), 3, 10, 5)
    _train(step, loop, data[:1])
    step.optimizer.param_groups[0]["weight_decay"] = 0.0
    snap = snapshot(model, step.optimizer)
    with pytest.raises(StepMismatchError, match=r"weight_decay 0.01 -> 0.0"):
        step(*data[1])
    assert unchanged(model, step.optimizer, snap)
    step.optimizer.param_groups[0]["weight_decay"] = 0.01
    _train(step, loop, data[1:], seed=101)  # the probes were set back: still equal
    assert_same_training(eager, model, loop.opt, step.optimizer)
    step.optimizer.param_groups[0]["maximize"] = True
    with pytest.raises(StepMismatchError, match=r"maximize False -> True"):
        step(*data[0])


def test_fused_and_unknown_optimizers_are_refused_with_what_works() -> None:
    with pytest.raises(ExecutorError, match=r"fused=True.*Supported: SGD"):
        PlannedStep(DropNet(), None, optimizer=lambda p: torch.optim.AdamW(p, fused=True),
                    example_inputs=_ex(), planner=fast_planner(), plan_cache=False)
    with pytest.raises(ExecutorError, match=r"NAdam.*supported optimizers: SGD.*AdamW"):
        PlannedStep(DropNet(), None, optimizer=lambda p: torch.optim.NAdam(p),
                    example_inputs=_ex(), planner=fast_planner(), plan_cache=False)


# ------------------------------------------------------------------ padding to buckets
def test_bucket_helpers() -> None:
    assert bucket_length(5, (8, 4)) == 8
    with pytest.raises(ConfigError, match="longer than the largest bucket 8"):
        bucket_length(9, (4, 8))
    x = torch.arange(6).view(2, 3)
    assert pad_to_bucket(x, (3, 6)) is x
    p = pad_to_bucket(x, (4,), value=-100)
    assert p.shape == (2, 4)
    assert p[:, 3].eq(-100).all()


class TokenNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb, self.head = nn.Embedding(20, 8), nn.Linear(8, 20)

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        h = torch.cumsum(self.emb(ids), dim=1)  # causal: position t sees positions <= t
        return F.cross_entropy(self.head(h).flatten(0, 1), labels.flatten(), ignore_index=-100)


@pytest.mark.slow
def test_padded_text_in_buckets_trains_like_eager_on_the_same_batches() -> None:
    torch.manual_seed(0)
    model = TokenNet()
    eager = copy.deepcopy(model)
    buckets = (4, 8)
    gen = torch.Generator().manual_seed(11)
    raw = [torch.randint(1, 20, (2, n), generator=gen) for n in (3, 7, 4, 6, 2)]
    pad = [[pad_to_bucket(r, buckets, value=0), pad_to_bucket(r, buckets, value=-100)]
           for r in raw]
    step = PlannedStep(model, None, optimizer="adamw", example_inputs=pad[0],
                       planner=fast_planner(), plan_cache=False)
    loop = EagerLoop(eager, make_optimizer_factory("adamw")[1])
    with pytest.warns(NewShapeWarning, match=r"\(2, 8\) int64"):
        _train(step, loop, pad)
    assert_same_training(eager, model, loop.opt, step.optimizer)
    assert len(step.variants) == 2  # two buckets, two plans


def test_the_tracer_records_the_clip_and_its_norm_as_an_output() -> None:
    ts = trace_fx(DropNet(), _ex(), None, "sgd", spec=StepSpec(max_grad_norm=1.0))
    assert len(ts.graph.outputs) == 2
    assert all(ts.graph.tensors[t].kind is TensorKind.OUTPUT for t in ts.graph.outputs)
    assert ts.graph.origin["max_grad_norm"] == 1.0


class FrozenStemCnn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn, self.fc = nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), \
            nn.Linear(4 * 6 * 6, 5)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.fc(torch.relu(self.bn(self.conv(x))).flatten(1)), y)


@pytest.mark.slow
def test_a_frozen_stem_before_batch_norm_trains_like_eager() -> None:
    """The batch norm's input needs no gradient: its backward computes none on CPU (the fake
    kernel said otherwise; trace/kernel_fakes.py)."""
    torch.manual_seed(0)
    model = FrozenStemCnn()
    model.conv.requires_grad_(False)
    eager = copy.deepcopy(model)
    example = [torch.zeros(2, 3, 6, 6), torch.zeros(2, dtype=torch.long)]
    step = PlannedStep(model, None, optimizer="sgd", example_inputs=example,
                       planner=fast_planner(), plan_cache=False)
    loop = EagerLoop(eager, make_optimizer_factory("sgd")[1])
    _train(step, loop, batches(example, 3, 12, 5))
    assert_same_training(eager, model, loop.opt, step.optimizer)
