"""A budget plan exported to stock PyTorch: ``apply_checkpoint_plan`` wraps modules in
``torch.utils.checkpoint`` with a selective policy; numerics equal the unwrapped model's."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import roam_core as rc
from roam_core.base.errors import ConfigError, ExecutorError
from roam_core.formats.policy_io import save_policy
from roam_core.model.plan import Plan
from roam_core.model.recompute_ops import recompute_ops_for


class Block(nn.Module):
    def __init__(self, d: int = 16, p: float = 0.1) -> None:
        super().__init__()
        self.fc = nn.Linear(d, 4 * d)
        self.proj = nn.Linear(4 * d, d)
        self.drop = nn.Dropout(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.drop(self.proj(F.gelu(self.fc(x))))


class Net(nn.Module):
    def __init__(self, n: int = 2, shared: bool = False) -> None:
        super().__init__()
        one = Block()
        self.blocks = nn.ModuleList(one if shared else Block() for _ in range(n))
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return self.head(x)


class ConvBlock(nn.Module):
    def __init__(self, c: int = 4) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.bn1(self.conv1(x)))
        return self.relu(x + self.bn2(self.conv2(y)))


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(ConvBlock() for _ in range(2))
        self.head = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return self.head(x.mean((2, 3)))


def _loss(out: torch.Tensor) -> torch.Tensor:
    return out.square().mean()


def _plan_dropping(graph: rc.Graph, keep: Callable[[rc.Op], bool]) -> Plan:
    """A plan record that drops every droppable storage made by an op ``keep`` picks."""
    from roam_core.model.recompute_ops import droppable_storages

    drops = [s for s in droppable_storages(graph)
             if keep(graph.op(graph.tensors[s].producer or ""))]
    assert drops
    return Plan(graph.fingerprint(), graph.name, "test", order=(), offsets={},
                alignment_bytes=512, arena_bytes=0, planned_peak_bytes=1 << 20,
                resident_bytes=0, baseline_peak_bytes=0, lower_bound_bytes=0,
                recompute=recompute_ops_for(graph, drops))


def _in_blocks(op: rc.Op) -> bool:
    """Made inside a block, not its output (a residual stream crosses blocks)."""
    return op.module.startswith("blocks.") and op.target != "aten.add.Tensor"


def _train(model: nn.Module, x: torch.Tensor, steps: int = 2) -> tuple[list[Any], ...]:
    """``steps`` AdamW steps from seed 1: losses, gradients of the last step, state."""
    torch.manual_seed(1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses, grads = [], []
    for _ in range(steps):
        loss = _loss(model(x))
        loss.backward()
        losses.append(loss.detach())
        grads = [p.grad.clone() for p in model.parameters()]
        opt.step()
        opt.zero_grad()
    return losses, grads, [t.clone() for t in model.state_dict().values()]


def _same(a: tuple[list[Any], ...], b: tuple[list[Any], ...]) -> bool:
    return all(len(x) == len(y) and all(torch.equal(u, v) for u, v in zip(x, y, strict=True))
               for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def net_case() -> tuple[Net, torch.Tensor, rc.Graph]:
    torch.manual_seed(0)
    model, x = Net(), torch.randn(8, 16)
    return model, x, rc.trace_training_step(model, [x], _loss)


def test_wrapped_model_trains_bit_exact_with_dropout(net_case) -> None:  # type: ignore[no-untyped-def]
    model, x, graph = net_case
    plan = _plan_dropping(graph, _in_blocks)
    wrapped = copy.deepcopy(model)
    applied = rc.apply_checkpoint_plan(wrapped, plan, graph)
    assert applied.modules == ("blocks.0", "blocks.1")
    assert applied.export.unexpressed == ()
    assert list(wrapped.state_dict()) == list(model.state_dict())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no mismatch warning
        assert _same(_train(copy.deepcopy(model), x), _train(wrapped, x))
    assert applied.mismatches == []
    applied.remove()
    assert all("forward" not in b.__dict__ for b in wrapped.blocks)


def test_another_mode_warns_and_still_equals_eager(net_case) -> None:  # type: ignore[no-untyped-def]
    model, x, graph = net_case
    wrapped = copy.deepcopy(model)
    applied = rc.apply_checkpoint_plan(wrapped, _plan_dropping(graph, _in_blocks), graph)
    plain = copy.deepcopy(model)
    wrapped.eval()
    plain.eval()  # no dropout ops: not the ops the plan was made for
    with pytest.warns(RuntimeWarning) as record:
        got = _train(wrapped, x, steps=1)
    assert any("module 'blocks.0'" in str(w.message) for w in record)
    assert _same(_train(plain, x, steps=1), got)
    assert applied.mismatches


@pytest.mark.slow
def test_shared_module_called_twice(net_case) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    model, x = Net(shared=True), torch.randn(8, 16)
    graph = rc.trace_training_step(model, [x], _loss)
    wrapped = copy.deepcopy(model)
    applied = rc.apply_checkpoint_plan(wrapped, _plan_dropping(graph, _in_blocks), graph)
    assert [(m.module, m.calls) for m in applied.export.modules] == [("blocks.0", 2)]
    assert _same(_train(copy.deepcopy(model), x), _train(wrapped, x))


@pytest.mark.slow
def test_batch_norm_buffers_move_once() -> None:
    torch.manual_seed(0)
    model, x = ConvNet(), torch.randn(2, 4, 8, 8)
    graph = rc.trace_training_step(model, [x], _loss)
    wrapped = copy.deepcopy(model)
    applied = rc.apply_checkpoint_plan(wrapped, _plan_dropping(graph, _in_blocks), graph)
    assert applied.modules
    assert applied.export.expressed_bytes > 0
    # losses, gradients and every parameter and buffer (running statistics and
    # num_batches_tracked included) equal after two steps
    assert _same(_train(copy.deepcopy(model), x), _train(wrapped, x))
    assert int(wrapped.blocks[0].bn1.num_batches_tracked) == 2


def test_bad_uses_are_refused(net_case, tmp_path) -> None:  # type: ignore[no-untyped-def]
    model, x, graph = net_case
    plan = _plan_dropping(graph, _in_blocks)
    with pytest.raises(ConfigError, match="graph="):
        rc.apply_checkpoint_plan(copy.deepcopy(model), plan)
    with pytest.raises(ConfigError, match=r"parameter 'blocks\.1\.fc\.weight'"):
        rc.apply_checkpoint_plan(Net(n=1), plan, graph)
    wrapped = copy.deepcopy(model)
    applied = rc.apply_checkpoint_plan(wrapped, plan, graph)
    with pytest.raises(ConfigError, match="already wrapped"):
        rc.apply_checkpoint_plan(wrapped, plan, graph)
    applied.remove()
    # a policy file applies without the graph
    path = tmp_path / "policy.json"
    save_policy(applied.export, path)
    again = rc.apply_checkpoint_plan(wrapped, path)
    assert again.modules == applied.modules
    assert _same(_train(copy.deepcopy(model), x, steps=1), _train(wrapped, x, steps=1))
    again.remove()
    with pytest.raises(ConfigError, match=r"no module 'blocks\.1'"):
        rc.apply_checkpoint_plan(Net(n=1), path)


@pytest.mark.slow
def test_under_torch_compile(net_case) -> None:  # type: ignore[no-untyped-def]
    """CPU inductor: the wrapped model compiles, matches the policy op for op (no mismatch)
    and gives the compiled unwrapped model's first loss; gradients (and so what follows)
    within float rounding: the re-runs are fused into other kernels.  Inductor's own random
    numbers are replayed for the re-run dropout, as ``fallback_random`` torch's are (a
    re-drawn mask would differ by far more)."""
    import torch._dynamo
    import torch._inductor.config as inductor_config

    model, x, graph = net_case
    wrapped = copy.deepcopy(model)
    applied = rc.apply_checkpoint_plan(wrapped, _plan_dropping(graph, _in_blocks), graph)
    try:
        for fallback in (True, False):
            torch._dynamo.reset()  # compiled code does not guard on inductor's settings
            with inductor_config.patch(fallback_random=fallback):
                want = _train(torch.compile(copy.deepcopy(model)), x)
                got = _train(torch.compile(copy.deepcopy(wrapped)), x)
            assert torch.equal(got[0][0], want[0][0]), fallback
            for a, b in zip(got[0] + got[1] + got[2], want[0] + want[1] + want[2],
                            strict=True):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    finally:
        torch._dynamo.reset()
    assert applied.mismatches == []


def test_a_deep_copy_of_a_wrapped_model_runs_its_own_parameters(net_case) -> None:  # type: ignore[no-untyped-def]
    model, x, graph = net_case
    wrapped = copy.deepcopy(model)
    rc.apply_checkpoint_plan(wrapped, _plan_dropping(graph, _in_blocks), graph)
    twin = copy.deepcopy(wrapped)
    _loss(twin(x)).backward()
    assert all(p.grad is not None for p in twin.parameters())
    assert all(p.grad is None for p in wrapped.parameters())


class _StatefulBlock(Block):
    """A block that runs another op once it has run (a key/value cache grows so)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        if getattr(self, "seen", False):
            h = h[:, :8].repeat(1, 8)
        self.seen = True
        return x + self.drop(self.proj(F.gelu(h)))


def test_a_module_keeping_state_between_calls_is_an_error(net_case) -> None:  # type: ignore[no-untyped-def]
    model, x, graph = net_case
    wrapped = copy.deepcopy(model)
    rc.apply_checkpoint_plan(wrapped, _plan_dropping(graph, _in_blocks), graph)
    wrapped.blocks[0].__class__ = _StatefulBlock
    loss = _loss(wrapped(x))
    with pytest.raises(ExecutorError, match="use_cache"):
        loss.backward()
