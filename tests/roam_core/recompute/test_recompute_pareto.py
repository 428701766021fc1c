"""roam's frontier is a frontier by FLOPs alone too: the fewest-FLOPs candidate's points, and
``--bytes-weight`` on ``roam plan`` / ``roam frontier``."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from roam_core.model.recompute_ops import recompute_cost
from roam_core.planner import make_plan
from roam_core.planner.budget_frontier import recompute_frontier
from roam_core.planner.config import PlannerConfig
from roam_core.recompute.evaluator import JitEvaluator
from roam_core.recompute.improve import best_of, fewest_flops
from tests.builders import random_train_graph

GREEDY = PlannerConfig(workers=1, layout_time_limit_s=2.0).with_recompute(exact_max_ops=0)


def _seeds(g, seed):  # type: ignore[no-untyped-def]
    rnd = random.Random(seed)
    ev = JitEvaluator(g, g.op_ids)
    return {f"s{i}": tuple(s for s in ev.droppable if rnd.random() < 0.5) for i in range(3)}


def _beaten(points, roam, key):  # type: ignore[no-untyped-def]
    return [p.method for p in points if p.method != "roam"
            and not any(r.peak_bytes <= p.peak_bytes and key(r) <= key(p) for r in roam)]


def test_fewest_flops_points_make_roam_dominate_by_flops_alone():
    # bytes moved weigh 20 FLOPs each: the objective keeps a plan that moves fewer bytes
    # for more FLOPs, and without the fewest-FLOPs points seed s0 beats roam by FLOPs alone
    g = random_train_graph(6, 7)
    cfg = GREEDY.with_recompute(bytes_weight=20.0)
    seeds = _seeds(g, 6)
    plans: dict = {}
    _sf, points, _ = recompute_frontier(g, cfg, budgets=3,
                                        baselines=False, extra_baselines=seeds, plans=plans)
    _sf, before, _ = recompute_frontier(g, cfg, budgets=3,
                                        baselines=False, extra_baselines=seeds,
                                        fewest_flops=False)
    old = [p for p in before if p.method == "roam"]
    assert _beaten(before, old, lambda p: p.extra_flops) == ["s0"]  # the gap this closes
    roam = [p for p in points if p.method == "roam"]
    extra = [p for p in roam if p.kept.endswith(", fewest FLOPs")]
    assert extra
    assert _beaten(points, roam, lambda p: p.extra_flops) == []
    cost = lambda p: p.extra_flops + 20.0 * p.extra_bytes_moved  # noqa: E731
    assert _beaten(points, roam, cost) == []  # still a frontier by the objective
    by_budget = {p.budget_bytes: p for p in roam if p not in extra}
    for q in extra:  # beside the objective's point at the same budget, with fewer FLOPs
        p = by_budget[q.budget_bytes]
        assert q.peak_bytes <= q.budget_bytes
        assert q.extra_flops < p.extra_flops
        assert cost(q) >= cost(p)  # else the objective would have kept it
    assert len([k for k in plans if k.startswith("roam-flops@")]) == len(extra)
    for k, plan in plans.items():  # every plan passed the validator in the planner
        if k.startswith("roam-flops@"):
            assert recompute_cost(g, plan.recompute)[0] == plan.extra_flops


def test_fewest_flops_prunes_by_flops_and_keeps_only_fitting_sets():
    g = random_train_graph(6, 7)
    ev = JitEvaluator(g, g.op_ids)
    full = tuple(ev.droppable)
    limit = ev.evaluate(full).peak_bytes
    cands = best_of(ev, limit, [("all", full)], 20.0, keep_unfit=True)
    assert cands
    few = fewest_flops(ev, limit, cands, below_flops=10**12, bytes_weight=20.0)
    assert few
    assert all(c.label == "all, fewest FLOPs" for c in few)
    assert all(c.evaluation.peak_bytes <= limit for c in few)
    flops = [c.evaluation.extra_flops for c in few]
    assert flops[0] <= min(c.evaluation.extra_flops for c in cands)
    # nothing has fewer FLOPs than 0
    assert fewest_flops(ev, limit, cands, below_flops=0) == []


@pytest.mark.slow
def test_cli_bytes_weight(tmp_path, capsys):
    from roam_core.cli import main
    from roam_core.formats.graph_io import save_graph

    g = random_train_graph(3, 6)
    path = tmp_path / "g.json"
    save_graph(g, path)
    plain = make_plan(g, GREEDY)
    budget = plain.arena_bytes - 512
    out = tmp_path / "p.json"
    assert main(["plan", str(path), "-o", str(out), "--budget", str(budget), "--workers",
                 "1", "--json", "--no-progress", "--bytes-weight", "0"]) == 0
    capsys.readouterr()
    saved = json.loads(out.read_text())
    assert saved["settings"]["recompute"]["bytes_weight"] == 0.0
    assert main(["frontier", str(path), "--budgets", "3", "--json", "--no-baselines",
                 "--bytes-weight", "0"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert any(p["method"] == "roam" for p in d["points"])
    with pytest.raises(SystemExit):
        main(["plan", str(path), "--budget", str(budget), "--bytes-weight", "-1"])
    assert "number >= 0" in capsys.readouterr().err


@pytest.mark.parametrize("seed", range(4))
def test_a_seed_over_the_target_is_a_last_resort_when_no_greedy_prefix_fits(seed):
    """Below every prefix of the greedy run, the first seed is still listed as a last resort
    (the planner's order may fit what the just-in-time order does not): it is not taken for
    roam's own candidate, which is never kept unfit."""
    from roam_core.planner.budget import BudgetPlanner

    g = random_train_graph(seed, 8)
    ev = JitEvaluator(g, g.op_ids)
    seeds = {"all": tuple(ev.droppable)}
    bp = BudgetPlanner(g, GREEDY, seeds=seeds, portfolio=True)
    bp.other_candidates = lambda: [("all", seeds["all"])]  # type: ignore[method-assign]
    target = min(bp.lowest_bytes(), JitEvaluator(g, bp.base.order).evaluate(
        seeds["all"]).peak_bytes) - 512
    got = bp._choice(target, False, [], last_resort=True)
    assert got
    assert [label for label, _ in got] == ["all"]


def test_frontier_is_monotone_in_the_budget():
    """A plan made for a lower budget fits every higher one: where the plan made for a higher
    budget costs more, the frontier keeps the cheaper one (and says so), so roam's points
    never get dearer as the budget grows."""
    from roam_core.planner.budget import BudgetPlanner
    from roam_core.planner.budget_frontier import FrontierPoint, _monotone

    g = random_train_graph(3, 5)
    bp = BudgetPlanner(g, GREEDY)
    hi, lo = bp.base.arena_bytes, bp.lowest_bytes()
    cheap = bp.plan_at(-(-(lo + 3 * (hi - lo) // 4) // 512) * 512)
    dear = bp.plan_at(-(-lo // 512) * 512)
    w = GREEDY.recompute.bytes_weight

    def cost(p):  # type: ignore[no-untyped-def]
        f, m = recompute_cost(g, p.recompute)
        return f + w * m

    assert cost(dear) > cost(cheap)
    b_low, b_high = cheap.arena_bytes, cheap.arena_bytes + 2**20
    points = [FrontierPoint("roam", p.arena_bytes, p.extra_flops, b, kept=k)
              for p, b, k in ((cheap, b_low, "a"), (dear, b_high, "b"))]
    plans: dict = {}
    notes: list[str] = []
    _monotone(g, GREEDY, [(b_high, dear, 1), (b_low, cheap, 0)], points, plans, notes)
    assert points[1] == replace(points[0], budget_bytes=b_high)
    assert plans == {f"roam@{b_high}": cheap}
    assert len(notes) == 1
    assert "fits and costs less" in notes[0]
    # already monotone: nothing changes
    before = list(points)
    _monotone(g, GREEDY, [(b_low, dear, 1), (b_high, cheap, 0)], points, {}, notes)
    assert points == before
    assert len(notes) == 1
