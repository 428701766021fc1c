"""PlannedStep: N planned steps equal N eager steps, bit for bit on CPU.

Every plan here uses a *random* valid order and a first-fit layout that reuses bytes (built
without the planner), so the equality shows that the order, the packing, the prepared fast
path and the optimizer's per-step scalars keep the numerics of the ordinary loop.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

import roam_core
from roam_core.base.errors import ExecutorError, PlanFormatError, RoamError
from roam_core.runtime import BatchMismatchError, PlannedStep
from roam_core.runtime.scalars import OptimizerScalars
from roam_core.trace import make_optimizer_factory, trace_fx
from roam_core.zoo import build_zoo_step
from tests.roam_core.runtime.exec_helpers import first_fit_plan, random_order

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


# ------------------------------------------------------------------ models
class TinyMLP(nn.Module):
    def __init__(self, d_in: int = 12, hidden: int = 16, classes: int = 5) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d_in, hidden), nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.fc2(torch.relu(self.fc1(x))), y)


class DropoutCNN(nn.Module):
    """Conv -> BatchNorm -> ReLU -> Dropout -> Linear -> Dropout: RNG and running stats."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.drop1 = nn.Dropout(0.2)
        self.fc = nn.Linear(4 * 6 * 6, 5)
        self.drop2 = nn.Dropout(0.3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = self.drop1(torch.relu(self.bn(self.conv(x))))
        return F.cross_entropy(self.drop2(self.fc(h.flatten(1))), y)


def _batches(example: Sequence[Any], n: int, seed: int, high: int) -> list[list[Any]]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        out.append([torch.randn(x.shape, generator=gen, dtype=x.dtype)
                    if x.dtype.is_floating_point
                    else torch.randint(0, high, tuple(x.shape), generator=gen, dtype=x.dtype)
                    for x in example])
    return out


def _train_both(model: nn.Module, example: Sequence[Any], loss_fn: Callable[..., Any] | None,
                optimizer: Any, *, steps: int = 3, seed: int = 0, high: int = 5,
                order_seed: int = 1, scheduler: Any = None, **kw: Any) -> dict[str, Any]:
    """Train copies of ``model`` eagerly and with PlannedStep on the same batches."""
    eager, planned = copy.deepcopy(model), copy.deepcopy(model)
    _, factory = make_optimizer_factory(optimizer, "steady")
    ts = trace_fx(eager, example, loss_fn, factory, setting="steady")
    plan = first_fit_plan(ts.graph, random_order(ts.graph, seed=order_seed))
    step = PlannedStep(planned, plan, loss_fn, factory, example_inputs=example, **kw)
    opt = factory(list(dict.fromkeys(eager.parameters())))
    sched_e = scheduler(opt) if scheduler else None
    sched_p = scheduler(step.optimizer) if scheduler else None
    losses_e, losses_p = [], []
    for i, batch in enumerate(_batches(example, steps, seed, high)):
        torch.manual_seed(100 + i)
        out = eager(*batch)
        loss = out if loss_fn is None else loss_fn(out)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses_e.append(loss.detach())
        torch.manual_seed(100 + i)
        losses_p.append(step(*batch))
        if scheduler:
            sched_e.step()
            sched_p.step()
    return {"eager": eager, "planned": planned, "step": step, "opt": opt, "plan": plan,
            "losses_e": losses_e, "losses_p": losses_p, "traced": ts}


def _assert_equal_training(r: dict[str, Any]) -> None:
    for i, (a, b) in enumerate(zip(r["losses_e"], r["losses_p"], strict=True)):
        assert torch.equal(a, b), f"step {i}: eager loss {a.item()} vs planned {b.item()}"
    se, sp = r["eager"].state_dict(), r["planned"].state_dict()
    assert se.keys() == sp.keys()
    for k in se:
        assert torch.equal(se[k], sp[k]), f"{k} differs after {len(r['losses_e'])} steps"
    oe, op = r["opt"].state_dict()["state"], r["step"].optimizer.state_dict()["state"]
    assert oe.keys() == op.keys()
    for i in oe:
        for k in oe[i]:
            assert torch.equal(oe[i][k], op[i][k]), f"optimizer state {i}:{k} differs"


# ------------------------------------------------------------------ training equality
@pytest.mark.parametrize("optimizer", ["adamw", "adam", "sgd"])
def test_mlp_trains_like_eager(optimizer: str) -> None:
    torch.manual_seed(0)
    model = TinyMLP()
    r = _train_both(model, [torch.zeros(6, 12), torch.zeros(6, dtype=torch.long)], None,
                    optimizer, steps=4)
    _assert_equal_training(r)
    assert r["losses_e"][0] != r["losses_e"][-1]  # it really trained


def test_zoo_mlp_trains_like_eager() -> None:
    st_ = build_zoo_step("mlp", 4, device="cpu")
    r = _train_both(st_.model, st_.example_inputs, st_.loss_fn, "adamw", steps=3, high=10)
    _assert_equal_training(r)


@pytest.mark.slow
def test_tiny_gpt_trains_like_eager() -> None:
    st_ = build_zoo_step("tiny_gpt", 2, 16, device="cpu")
    r = _train_both(st_.model, st_.example_inputs, st_.loss_fn, "adamw", steps=3, high=256)
    _assert_equal_training(r)


@pytest.mark.slow
def test_cnn_with_batchnorm_and_dropout_trains_like_eager() -> None:
    torch.manual_seed(0)
    r = _train_both(DropoutCNN(), [torch.zeros(4, 3, 6, 6), torch.zeros(4, dtype=torch.long)],
                    None, "adam", steps=4)
    _assert_equal_training(r)
    # running statistics advanced in the arena, as in eager
    assert int(r["planned"].bn.num_batches_tracked) == 4


@pytest.mark.slow
def test_residual_block_zoo_cnn_trains_like_eager() -> None:
    st_ = build_zoo_step("residual_block", 2, device="cpu")
    r = _train_both(st_.model, st_.example_inputs, st_.loss_fn, "sgd", steps=3, high=10)
    _assert_equal_training(r)


@pytest.mark.slow
def test_hugging_face_gpt2_with_dropout_trains_like_eager() -> None:
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64,
                                  n_positions=16)  # dropout 0.1 everywhere (HF default)
    torch.manual_seed(0)
    lm = transformers.GPT2LMHeadModel(cfg).train()

    class LM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lm = lm

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.lm(input_ids=ids, labels=ids).loss

    r = _train_both(LM(), [torch.zeros(2, 8, dtype=torch.long)], None, "adamw", steps=3,
                    high=64)
    _assert_equal_training(r)
    # the tied LM head stays tied (one arena slot)
    assert r["planned"].lm.lm_head.weight is r["planned"].lm.transformer.wte.weight


@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(order_seed=st.integers(0, 10_000), seed=st.integers(0, 10_000),
       optimizer=st.sampled_from(["adamw", "adam", "sgd"]), steps=st.integers(1, 4))
def test_property_any_order_any_batches_trains_like_eager(order_seed: int, seed: int,
                                                          optimizer: str, steps: int) -> None:
    torch.manual_seed(seed)
    r = _train_both(TinyMLP(6, 8, 3), [torch.zeros(3, 6), torch.zeros(3, dtype=torch.long)],
                    None, optimizer, steps=steps, seed=seed, high=3, order_seed=order_seed)
    _assert_equal_training(r)


def test_learning_rate_scheduler_is_followed() -> None:
    torch.manual_seed(0)
    r = _train_both(TinyMLP(), [torch.zeros(6, 12), torch.zeros(6, dtype=torch.long)], None,
                    "adamw", steps=4,
                    scheduler=lambda o: torch.optim.lr_scheduler.StepLR(o, 1, gamma=0.5))
    _assert_equal_training(r)


def test_verify_mode_checks_every_call() -> None:
    torch.manual_seed(0)
    r = _train_both(TinyMLP(), [torch.zeros(6, 12), torch.zeros(6, dtype=torch.long)], None,
                    "adamw", steps=3, verify=True)
    _assert_equal_training(r)
    assert r["step"].program.checked_runs == 3
    assert r["step"].stats().checked_values > 0


def test_fast_path_runs_after_one_checked_call() -> None:
    torch.manual_seed(0)
    r = _train_both(TinyMLP(), [torch.zeros(6, 12), torch.zeros(6, dtype=torch.long)], None,
                    "sgd", steps=3)
    prog = r["step"].program
    assert prog.checked_runs == 1
    assert prog._fast is not None
    views = [i for i in prog.instrs if i.kind == "view"]
    assert views, "views over fixed slots are computed once"
    assert len(prog._fast) <= len(prog.instrs) - len(views)


# ------------------------------------------------------------------ the model holds the values
def test_parameters_are_arena_views_and_state_dict_round_trips(tmp_path) -> None:
    torch.manual_seed(0)
    r = _train_both(TinyMLP(), [torch.zeros(6, 12), torch.zeros(6, dtype=torch.long)], None,
                    "adamw", steps=2)
    step, planned = r["step"], r["planned"]
    for p in planned.parameters():
        assert step.holds(p)  # the parameters are slots of the step's buffer
    for st_ in step.optimizer.state.values():
        assert all(step.holds(v) for v in st_.values() if v.numel() > 1)
    # one plan: the step holds its arena (residents at its bottom, then the rest; the last
    # storage not rounded up)
    assert r["plan"].arena_bytes - 512 < step.arena_bytes <= r["plan"].arena_bytes
    path = tmp_path / "ckpt.pt"
    torch.save({"model": planned.state_dict(), "opt": step.optimizer.state_dict()}, path)
    assert path.stat().st_size < 64 * 1024  # the slots, not the whole arena
    ck = torch.load(path, weights_only=True)
    fresh = TinyMLP()
    fresh.load_state_dict(ck["model"])
    for k, v in planned.state_dict().items():
        assert torch.equal(fresh.state_dict()[k], v)
    # training on from the checkpoint eagerly equals one more planned step
    opt = make_optimizer_factory("adamw")[1](list(fresh.parameters()))
    opt.load_state_dict(ck["opt"])
    x, y = torch.randn(6, 12), torch.randint(0, 5, (6,))
    loss = fresh(x, y)
    loss.backward()
    opt.step()
    assert torch.equal(step(x, y), loss.detach())
    for a, b in zip(fresh.parameters(), planned.parameters(), strict=True):
        assert torch.equal(a, b)


def test_writes_to_the_model_between_steps_are_seen() -> None:
    torch.manual_seed(0)
    r = _train_both(TinyMLP(), [torch.zeros(6, 12), torch.zeros(6, dtype=torch.long)], None,
                    "sgd", steps=1)
    with torch.no_grad():
        r["planned"].fc1.weight.zero_()
        r["eager"].fc1.weight.zero_()
    x, y = torch.randn(6, 12), torch.randint(0, 5, (6,))
    loss = r["eager"](x, y)
    loss.backward()
    r["opt"].step()
    assert torch.equal(r["step"](x, y), loss.detach())


def test_first_batch_sets_up_without_example_inputs() -> None:
    torch.manual_seed(0)
    model = TinyMLP()
    eager = copy.deepcopy(model)
    x, y = torch.randn(6, 12), torch.randint(0, 5, (6,))
    ts = trace_fx(eager, [x, y], None, "sgd")
    plan = first_fit_plan(ts.graph, random_order(ts.graph, seed=3))
    step = roam_core.PlannedStep(model, plan, optimizer="sgd")
    assert step.optimizer is None  # built on the first call
    loss = step(x, y)
    e = eager(x, y)
    assert torch.equal(loss, e.detach())
    assert isinstance(loss, torch.Tensor)
    assert loss.shape == ()


def test_returned_losses_are_not_overwritten() -> None:
    torch.manual_seed(0)
    r = _train_both(TinyMLP(), [torch.zeros(6, 12), torch.zeros(6, dtype=torch.long)], None,
                    "sgd", steps=3)
    assert len({float(v) for v in r["losses_p"]}) == 3


# ------------------------------------------------------------------ errors change nothing
@pytest.fixture
def mlp_step():
    torch.manual_seed(0)
    model = TinyMLP()
    x, y = torch.zeros(6, 12), torch.zeros(6, dtype=torch.long)
    ts = trace_fx(model, [x, y], None, "adamw")
    plan = first_fit_plan(ts.graph, random_order(ts.graph, seed=2))
    return model, plan, ts, [x, y]


def _snapshot(model: nn.Module) -> list[tuple[int, torch.Tensor]]:
    return [(p.data_ptr(), p.detach().clone()) for p in model.parameters()]


def _unchanged(model: nn.Module, snap: list[tuple[int, torch.Tensor]]) -> bool:
    return all(p.data_ptr() == ptr and torch.equal(p, v)
               for p, (ptr, v) in zip(model.parameters(), snap, strict=True))


def test_mismatched_batch_is_refused_and_changes_nothing(mlp_step) -> None:
    model, plan, _, example = mlp_step
    step = PlannedStep(model, plan, optimizer="adamw", example_inputs=example,
                       on_new_shape="error", plan_cache=False)
    step(*example)
    snap = _snapshot(model)
    state = copy.deepcopy(step.optimizer.state_dict())
    for bad, match in (
            ([torch.zeros(7, 12), torch.zeros(7, dtype=torch.long)],
             r"batch \(7, 12\) float32, \(7,\) int64: the step has no plan"),
            ([torch.zeros(6, 12, dtype=torch.float64), torch.zeros(6, dtype=torch.long)],
             r"float64.*no plan"),
            ([torch.zeros(6, 12)], "traced with 2 inputs, got 1"),
            ([torch.zeros(6, 12), 3], "expected a tensor")):
        with pytest.raises(BatchMismatchError, match=match):
            step(*bad)
    assert _unchanged(model, snap)
    assert step.calls == 1
    after = step.optimizer.state_dict()["state"]
    for i in state["state"]:
        for k, v in state["state"][i].items():
            assert torch.equal(after[i][k], v)


def test_plan_for_another_graph_is_refused_and_changes_nothing(mlp_step) -> None:
    model, plan, _, _ = mlp_step
    snap = _snapshot(model)
    other = [torch.zeros(3, 12), torch.zeros(3, dtype=torch.long)]
    with pytest.raises(PlanFormatError, match="plan was made for graph"):
        PlannedStep(model, plan, optimizer="adamw", example_inputs=other)
    with pytest.raises(PlanFormatError):  # another optimizer is another graph
        PlannedStep(model, plan, optimizer="sgd",
                    example_inputs=[torch.zeros(6, 12), torch.zeros(6, dtype=torch.long)])
    assert _unchanged(model, snap)


def test_model_with_other_parameters_names_the_parameter(mlp_step) -> None:
    _, plan, ts, example = mlp_step
    wider = TinyMLP(hidden=24)
    snap = _snapshot(wider)
    with pytest.raises(PlanFormatError, match=r"parameter 'fc1.weight' is \(24, 12\)"):
        PlannedStep(wider, plan, optimizer="adamw", example_inputs=example, graph=ts.graph)
    assert _unchanged(wider, snap)
    with pytest.raises(RoamError):
        PlannedStep(wider, plan, optimizer="adamw", example_inputs=example)


def test_meta_model_is_refused(mlp_step) -> None:
    _, plan, _, example = mlp_step
    with torch.device("meta"):
        meta = TinyMLP()
    with pytest.raises(ExecutorError, match="meta device"):
        PlannedStep(meta, plan, optimizer="adamw", example_inputs=example)


@pytest.mark.slow
@pytest.mark.parametrize(("factory", "match"), [
    (lambda p: torch.optim.NAdam(p, foreach=False), "does not know its initial state"),
    (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.1, foreach=False),
     "dampening"),
    (lambda p: torch.optim.Adam(p, fused=True), r"fused=True.*use foreach=True or foreach="),
    (lambda p: torch.optim.RAdam(p, foreach=False), r"supported optimizers: SGD"),
])
def test_unsupported_optimizers_are_refused(factory: Any, match: str) -> None:
    torch.manual_seed(0)
    model = TinyMLP()
    example = [torch.zeros(6, 12), torch.zeros(6, dtype=torch.long)]
    ts = trace_fx(model, example, None, factory)
    plan = first_fit_plan(ts.graph, random_order(ts.graph, seed=2))
    snap = _snapshot(model)
    with pytest.raises(ExecutorError, match=match):
        PlannedStep(model, plan, optimizer=factory, example_inputs=example)
    assert _unchanged(model, snap)


# ------------------------------------------------------------------ the scalar follower
def test_adam_bias_corrections_follow_the_step_count() -> None:
    torch.manual_seed(0)
    model = TinyMLP()
    example = [torch.zeros(6, 12), torch.zeros(6, dtype=torch.long)]
    ts = trace_fx(model, example, None, "adam")
    params = list(model.parameters())
    opt = make_optimizer_factory("adam")[1](params)
    sc = OptimizerScalars(opt, ts, params)
    lr, (b1, _) = opt.defaults["lr"], opt.defaults["betas"]
    assert sc.slots  # the traced step's numbers were matched
    for t in (1, 2, 3, 10):
        while sc.steps < t:
            values = sc.advance()
        assert any(v == pytest.approx(-lr / (1 - b1 ** t), rel=1e-12) for v in values), t
        if t == 2:  # the traced step: the graph's own constants
            traced = {a for n in ts.gm.graph.nodes if n.name in sc.slots
                      for a in list(n.args) + list(n.kwargs.values())
                      if isinstance(a, float)}
            assert {v for v in values if isinstance(v, float)} <= traced


# ------------------------------------------------------------------ GPU
@pytest.mark.gpu
@needs_cuda
def test_cuda_training_matches_eager_within_tolerance() -> None:
    torch.manual_seed(0)
    model = TinyMLP()
    example = [torch.zeros(6, 12, device="cuda"), torch.zeros(6, dtype=torch.long,
                                                              device="cuda")]
    eager = copy.deepcopy(model).cuda()
    ts = trace_fx(eager, example, None, "adamw", device="cuda")
    plan = first_fit_plan(ts.graph, random_order(ts.graph, seed=2))
    step = PlannedStep(model, plan, optimizer="adamw", example_inputs=example, device="cuda")
    opt = make_optimizer_factory("adamw")[1](list(eager.parameters()))
    for batch in _batches(example, 3, 0, 5):
        batch = [b.cuda() for b in batch]
        le = eager(*batch)
        le.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.testing.assert_close(step(*batch), le.detach(), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ roam train
@pytest.mark.slow
def test_roam_train_cli_json_on_a_tiny_model(capsys) -> None:
    import json

    from roam_core.cli import main
    from roam_core.runtime.compare_training import TRAIN_KEYS

    assert main(["train", "mlp", "-b", "2", "--steps", "3", "--method", "eager",
                 "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert set(TRAIN_KEYS) <= set(r)
    assert r["steps"] == 3
    assert r["device"] == "cpu"
    assert r["max_abs_diff"] == 0.0
    assert r["losses_eager"] == r["losses_planned"]
    assert len(set(r["losses_eager"])) == 3  # new batch every step
    assert r["eager_peak_reserved_bytes"] is None
    assert r["planned_peak_reserved_bytes"] is None
    assert r["arena_bytes"] > 0
    assert r["eager_step_seconds"] > 0
    assert r["planned_step_seconds"] > 0
    assert r["timing"] == "interleaved"


@pytest.mark.slow
def test_roam_train_cli_with_a_plan_file(tmp_path, capsys) -> None:
    from roam_core.cli import main
    from roam_core.formats.plan_io import save_plan
    from roam_core.planner import make_plan
    from roam_core.planner.config import PlannerConfig
    from roam_core.zoo import trace_zoo

    ts = trace_zoo("tiny_gpt", 1, 8, "steady", "sgd")  # `roam trace ... --setting steady`
    plan = make_plan(ts.graph, PlannerConfig(workers=1, solve_layout=False), method="lescea")
    path = tmp_path / "plan.json"
    save_plan(plan, path)
    assert main(["train", "tiny_gpt", "-b", "1", "-t", "8", "--optimizer", "sgd",
                 "--steps", "2", "--plan", str(path)]) == 0
    out = capsys.readouterr().out
    assert "max |eager - planned| = 0 (ok)" in out
    # a plan for another batch size is refused with exit status 2
    assert main(["train", "tiny_gpt", "-b", "2", "-t", "8", "--optimizer", "sgd",
                 "--steps", "1", "--plan", str(path)]) == 2
    assert "plan was made for graph" in capsys.readouterr().err


class InplaceViewNet(nn.Module):
    """``unsqueeze_`` / ``t_`` change a tensor's shape in place; replays must not pile them up."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc(x)) * 2
        h.unsqueeze_(0)
        w = self.fc.weight.detach() + 1  # a new tensor, transposed in place
        w.t_()
        return F.mse_loss(h.squeeze(0) + (x @ w).mean(), y)


@pytest.mark.filterwarnings("error:.*was resized")  # an out= kernel fed a reshaped slot
@pytest.mark.parametrize("verify", [False, True])
def test_in_place_view_ops_replay_step_after_step(verify: bool) -> None:
    torch.manual_seed(0)
    r = _train_both(InplaceViewNet(), [torch.zeros(5, 4), torch.zeros(5, 3)], None, "adamw",
                    steps=4, verify=verify)
    _assert_equal_training(r)
    assert r["step"].program.restore, "the in-place view ops were seen"


# ------------------------------------------------------------------ the program
def test_execute_replay_is_the_checked_mode_of_the_same_program() -> None:
    from roam_core.runtime.arena_runner import ArenaRunner
    from roam_core.runtime.step import load_arena, prepare_state

    torch.manual_seed(0)
    model = TinyMLP()
    example = [torch.randn(6, 12), torch.randint(0, 5, (6,))]
    ts = trace_fx(model, example, None, "sgd")
    plan = first_fit_plan(ts.graph, random_order(ts.graph, seed=7))
    runner = ArenaRunner(ts.gm, ts.graph, ts.values, plan.offsets, plan.arena_bytes)
    st = prepare_state(ts, model, example, make_optimizer_factory("sgd")[1], "cpu")
    load_arena(runner, st)
    first = runner.run(plan.order)[0].clone()  # checked: addresses verified
    prog = runner.program(plan.order)
    assert prog.checked_runs == 1
    assert runner.stats().checked_values > 0
    assert runner.stats().out_variant_ops == prog.counts["out"] > 0
    load_arena(runner, st)  # same inputs again: the fast path gives the same loss
    assert torch.equal(runner.run(plan.order)[0], first)
    assert prog.checked_runs == 1
    assert runner.program(plan.order) is prog  # prepared once per order
    load_arena(runner, st)
    assert torch.equal(runner.run(plan.order, checked=True)[0], first)
    assert prog.checked_runs == 2


def test_resuming_from_a_checkpoint_follows_the_loaded_state(tmp_path) -> None:
    """Two eager steps, checkpoint, then PlannedStep resumes: steps 3-4 equal eager's."""
    torch.manual_seed(0)
    example = [torch.zeros(6, 12), torch.zeros(6, dtype=torch.long)]
    eager = TinyMLP()
    resumed = copy.deepcopy(eager)
    factory = make_optimizer_factory("adam")[1]
    opt = factory(list(eager.parameters()))
    batches = _batches(example, 4, 3, 5)
    for b in batches[:2]:
        eager(*b).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.save({"model": eager.state_dict(), "opt": opt.state_dict()}, tmp_path / "ck.pt")
    ts = trace_fx(resumed, example, None, "adam")
    plan = first_fit_plan(ts.graph, random_order(ts.graph, seed=5))
    step = PlannedStep(resumed, plan, optimizer="adam", example_inputs=example)
    ck = torch.load(tmp_path / "ck.pt", weights_only=True)
    resumed.load_state_dict(ck["model"])
    step.optimizer.load_state_dict(ck["opt"])  # replaces the state tensors: taken in
    for b in batches[2:]:
        loss = eager(*b)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        assert torch.equal(step(*b), loss.detach())
    for a, b in zip(eager.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(a, b)
    assert float(next(iter(step.optimizer.state.values()))["step"]) == 4
