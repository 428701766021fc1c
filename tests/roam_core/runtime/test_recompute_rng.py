"""Recomputing random ops: dropout masks re-drawn from the replayed RNG state, bit-exactly."""

from __future__ import annotations

import copy
import itertools
from dataclasses import replace

import pytest
import torch

from roam_core.base.errors import GraphError, PlanInvalidError, ViolationKind
from roam_core.model.graph import Alias, Graph, Op, Phase, Tensor, TensorKind
from roam_core.model.recompute_ops import (
    COPY_SUFFIX,
    droppable_storages,
    expand_graph,
    inplace_built_storages,
    recompute_blocker,
    recompute_blockers,
)
from roam_core.oracle.validate import check_plan, check_recompute
from roam_core.planner import make_plan
from roam_core.planner.budget import BudgetPlanner
from roam_core.planner.config import PlannerConfig
from roam_core.runtime import execute_plan
from roam_core.trace import trace_fx

CFG = PlannerConfig(workers=1, layout_time_limit_s=2.0)


def _mlp():  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Dropout(0.1), torch.nn.GELU(),
                               torch.nn.Linear(64, 64), torch.nn.Dropout(0.1), torch.nn.ReLU(),
                               torch.nn.Linear(64, 8))


def _loss(y):  # type: ignore[no-untyped-def]
    return y.square().mean()


def _random_storages(g: Graph) -> list[str]:
    """Droppable storages built by a random op (the dropout masks)."""
    return [s for s in droppable_storages(g)
            if any(g.op(w).random for w in g.tensors[s].consumers
                   if s in g.op(w).mutates) or g.op(g.tensors[s].producer).random]


def _mask_plan(model, xs, loss_fn):  # type: ignore[no-untyped-def]
    g = trace_fx(model, list(xs), loss_fn, "adamw").graph
    masks = _random_storages(g)
    assert masks, "the dropout masks should be droppable"
    plan = BudgetPlanner(g, CFG).plan_for_drops(masks)
    assert any(g.op(r.source).random for r in plan.recompute)
    return g, plan


def test_traced_dropout_draws_are_recomputable():
    g = trace_fx(_mlp(), [torch.randn(64, 32)], _loss, "adamw").graph
    rnd = [o for o in g.ops if o.random]
    assert len(rnd) == 2
    assert all(o.recomputable is True for o in rnd)
    why = recompute_blockers(g)
    assert all(why[o.id] is None for o in rnd)
    # CPU dropout builds its float mask in place: empty_like -> bernoulli_ -> div_
    built = inplace_built_storages(g)
    assert {s for o in rnd for s in o.mutates} <= built
    assert len(_random_storages(g)) == 2
    # the verdict survives the graph file
    from roam_core.formats.graph_io import dumps_graph, loads_graph

    g2 = loads_graph(dumps_graph(g))
    assert [o.recomputable for o in g2.ops if o.random] == [True, True]
    assert _random_storages(g2) == _random_storages(g)
    # a graph that does not vouch for the draw (traced before, or by hand) keeps them
    old = replace(g, ops=tuple(replace(o, recomputable=None) if o.random else o
                               for o in g.ops))
    assert all(recompute_blocker(old, o.id) is not None for o in rnd)
    assert not _random_storages(old)


def _t(i: str, p: str | None, kind: TensorKind = TensorKind.ACTIVATION) -> Tensor:
    return Tensor(i, 64, "float32", (16,), kind, p)


def _built_graph(reader_between: bool) -> Graph:
    """x -> e = empty_like(x) -> fill_(e) -> scale_(e) -> y = mul(x, e); backward reads e."""
    ops = [Op("x", "aten.randn", Phase.FORWARD, (), ("x",)),
           Op("e", "aten.empty_like.default", Phase.FORWARD, ("x",), ("e",)),
           Op("fill", "aten.bernoulli_.float", Phase.FORWARD, ("e",), ("e1",), ("e",),
              random=True, recomputable=True)]
    if reader_between:
        ops.append(Op("peek", "aten.sum.default", Phase.FORWARD, ("e1",), ("pk",)))
    ops += [Op("scale", "aten.div_.Scalar", Phase.FORWARD, ("e1",), ("e2",), ("e",)),
            Op("y", "aten.mul.Tensor", Phase.FORWARD, ("x", "e2"), ("y",)),
            Op("gy", "aten.mul.Tensor", Phase.BACKWARD, ("y", "e2"), ("gy",))]
    tensors = [_t("x", "x"), _t("e", "e"), _t("y", "y"), _t("gy", "gy", TensorKind.OUTPUT)]
    if reader_between:
        tensors.append(_t("pk", "peek"))
    aliases = [Alias("e1", "e", "fill"), Alias("e2", "e", "scale")]
    return Graph.build(ops, tensors, aliases, outputs=("gy",))


def test_inplace_built_storage_rules():
    g = _built_graph(False)
    assert inplace_built_storages(g) == {"e"}
    assert "e" in droppable_storages(g)
    # a forward reader of a half-built version: the chain cannot be re-run
    g2 = _built_graph(True)
    assert "e" not in inplace_built_storages(g2)
    assert "e" not in droppable_storages(g2)
    assert recompute_blocker(g2, "fill") == "writes in place"


def test_expanded_inplace_chain_writes_only_the_copy():
    from roam_core.model.recompute_ops import recompute_ops_for

    g = _built_graph(False)
    rops = recompute_ops_for(g, ["e"])
    assert [r.source for r in rops] == ["e", "fill", "scale"]
    g2 = expand_graph(g, rops)
    assert g2.op("fill" + COPY_SUFFIX).mutates == ("e" + COPY_SUFFIX,)
    assert g2.op("scale" + COPY_SUFFIX).mutates == ("e" + COPY_SUFFIX,)
    assert g2.op("gy").inputs == ("y", "e2" + COPY_SUFFIX)
    reasons = {(e.src, e.dst): e.reason.value for e in g2.control_edges}
    assert reasons[("fill", "fill@r")] == "rng"  # the re-run replays the source's state
    # a re-run of a writer that reads the original would write it: refused
    bad = [rops[0], replace(rops[1], inputs=("e",))]
    with pytest.raises(GraphError, match="in place"):
        expand_graph(g, bad)
    order = ("x", "e", "fill", "scale", "y", "e@r", "fill@r", "gy")
    v = check_recompute(g, bad, order)
    assert any(x.kind is ViolationKind.RECOMPUTE_MISMATCH and "in place" in x.message
               for x in v)


@pytest.mark.slow
def test_a_random_rerun_before_its_source_is_refused():
    model, x = _mlp(), torch.randn(64, 32)
    g, plan = _mask_plan(model, [x], _loss)
    assert not check_plan(g, plan)
    r = next(r for r in plan.recompute if g.op(r.source).random)
    order = [o for o in plan.order if o != r.id]
    order.insert(order.index(r.source), r.id)
    bad = replace(plan, order=tuple(order))
    v = check_recompute(g, plan.recompute, bad.order)
    assert any(x.kind is ViolationKind.RNG_ORDER and x.subject_id == r.id for x in v)
    with pytest.raises(PlanInvalidError):
        execute_plan(model, [x], bad, loss_fn=_loss, optimizer="adamw", device="cpu")


@pytest.mark.slow
def test_recomputed_dropout_replays_bit_exact(monkeypatch):
    model, x = _mlp(), torch.randn(512, 32)
    _g, plan = _mask_plan(model, [x], _loss)
    rep = execute_plan(model, [x], plan, loss_fn=_loss, optimizer="adamw", device="cpu")
    assert rep.max_abs_diff == 0.0
    # the control: without the RNG replay the re-drawn masks differ from the forward's
    from roam_core.trace.rng import RngTimeline

    monkeypatch.setattr(RngTimeline, "with_replay", lambda self, op, of: self)
    rep = execute_plan(model, [x], plan, loss_fn=_loss, optimizer="adamw", device="cpu",
                       strict=False)
    assert rep.max_abs_diff > 0.0


def _gpt():  # type: ignore[no-untyped-def]
    from roam_core.zoo.transformer import GPT2, GPT2Config

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=64, n_positions=64, n_embd=64, n_layer=2, n_head=4,
                     dropout=0.1)
    return GPT2(cfg, lm_head=True, attention="math"), [torch.randint(0, 64, (4, 64))]


def _lm_loss(y):  # type: ignore[no-untyped-def]
    return y.float().square().mean()


@pytest.mark.slow
def test_tiny_gpt_dropout_budget_plan_replays_bit_exact_for_several_steps():
    from roam_core.runtime import PlannedStep

    model, xs = _gpt()
    g = trace_fx(model, xs, _lm_loss, "adamw").graph
    bp = BudgetPlanner(g, CFG)
    # 5% of the way up from the lowest reachable peak: the lowest itself leaves the layout no
    # slack, and this layout is cut by a wall-clock limit (a loaded machine may miss it)
    budget = bp.lowest_bytes() + (bp.base.arena_bytes - bp.lowest_bytes()) // 20
    plan = bp.plan_at(budget)
    assert plan.arena_bytes <= budget
    assert any(g.op(r.source).random for r in plan.recompute), "a dropout is recomputed"
    assert plan.arena_bytes < bp.base.arena_bytes
    rep = execute_plan(model, xs, plan, loss_fn=_lm_loss, optimizer="adamw", device="cpu")
    assert rep.max_abs_diff == 0.0  # loss, parameters and AdamW moments (0.1 x gradient)
    ref = copy.deepcopy(model)
    opt = torch.optim.AdamW(ref.parameters(), foreach=False, fused=False)
    step = PlannedStep(model, plan, _lm_loss, "adamw", example_inputs=xs)
    for i in range(3):
        torch.manual_seed(100 + i)
        loss = step(*xs)
        after_planned = torch.get_rng_state()
        torch.manual_seed(100 + i)
        opt.zero_grad(set_to_none=True)
        want = _lm_loss(ref(*xs))
        want.backward()
        after_eager = torch.get_rng_state()
        opt.step()
        assert torch.equal(torch.as_tensor(loss).float(), want.detach().float())
        for a, b in zip(model.parameters(), ref.parameters(), strict=True):
            assert torch.equal(a.detach(), b.detach())
        # the planned step leaves the RNG stream where eager does (the next step's masks)
        assert torch.equal(after_planned, after_eager)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 3])
def test_exact_and_greedy_plans_rerun_replayed_random_ops_after_their_source(seed):
    """Every forward op random with a replayed draw (an RNG chain through the forward): the
    exact oracle and the greedy planner re-run them, always after their sources, and the
    greedy never beats the exact optimum."""
    from roam_core.model.graph import ControlEdge, EdgeReason, Phase
    from roam_core.model.recompute_ops import recompute_cost
    from roam_core.recompute.exact import exact_recompute
    from tests.builders import random_train_graph

    g0 = random_train_graph(seed, 6)
    rnd = [o.id for o in g0.ops if o.phase is Phase.FORWARD and g0.storages_created(o.id)]
    ops = tuple(replace(o, random=True, recomputable=True) if o.id in rnd else o
                for o in g0.ops)
    edges = (*g0.control_edges, *(ControlEdge(a, b, EdgeReason.RNG)
                                  for a, b in itertools.pairwise(rnd)))
    g = type(g0)(ops, g0.tensors, g0.aliases, edges, g0.outputs, g0.name, g0.origin)
    assert droppable_storages(g)
    p0 = make_plan(g, replace(CFG, solve_layout=False))
    res = g.resident_bytes()
    budget = res + int((p0.planned_peak_bytes - res) * 0.8) // 512 * 512
    ex = exact_recompute(g, budget, time_limit_s=30)
    assert ex.status == "optimal"
    assert ex.recompute
    pos = {o: i for i, o in enumerate(ex.order)}
    for r in ex.recompute:
        assert g.op(r.source).random
        assert pos[r.source] < pos[r.id]
    p = make_plan(g, replace(CFG, budget_bytes=budget).with_recompute(exact_max_ops=0))
    assert p.recompute
    assert not check_plan(g, p)
    pos = {o: i for i, o in enumerate(p.order)}
    assert all(pos[r.source] < pos[r.id] for r in p.recompute)
    flops, moved = recompute_cost(g, p.recompute)
    assert flops + moved >= ex.cost - 1


@pytest.mark.slow
def test_fresh_process_measurement_runs_a_dropout_recompute_plan():
    """The CUDA measuring path (a spawned child re-traces) expands the recompute ops too."""
    from roam_core.runtime.measure import measure_subprocess, pickled_recipe

    model, x = _mlp(), torch.randn(64, 32)
    _g, plan = _mask_plan(model, [x], _loss)
    recipe = pickled_recipe(model, [x], _loss, "adamw", "steady", {})
    assert recipe is not None
    peaks = measure_subprocess(recipe, plan, "planned", device="cpu")
    assert peaks.seconds_per_step > 0


@pytest.mark.slow
def test_hf_gpt2_with_dropout_recomputes_masks_bit_exact():
    """A Hugging Face GPT-2 built from a config (dropout 0.1 everywhere): the lowest budget
    plan re-draws dropout masks and replays bit-exactly."""
    transformers = pytest.importorskip("transformers")
    from roam_core.zoo.hf import hf_step

    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128,
                                  n_positions=64, resid_pdrop=0.1, embd_pdrop=0.1,
                                  attn_pdrop=0.1, bos_token_id=0, eos_token_id=0)
    model, _, loss_fn = hf_step(cfg, 2, 32)
    torch.manual_seed(0)
    model = model.to_empty(device="cpu")
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.02)
    xs = [torch.randint(0, 128, (2, 32))]
    g = trace_fx(model, xs, loss_fn, "adamw").graph
    bp = BudgetPlanner(g, CFG)
    plan = bp.plan_at(bp.lowest_bytes() + (bp.base.arena_bytes - bp.lowest_bytes()) // 20)
    assert sum(g.op(r.source).random for r in plan.recompute) >= 2
    rep = execute_plan(model, xs, plan, loss_fn=loss_fn, optimizer="adamw", device="cpu")
    assert rep.max_abs_diff == 0.0
