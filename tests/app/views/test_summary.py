"""The summary card and its why notes."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from app.analysis import planner, settings
from app.views.summary import model as summary_model
from app.views.summary import view as summary_view
from roam_core.formats.graph_io import load_graph
from roam_core.model.samples import tiny_train_step
from tests.app.helpers import (
    planned_with_tree,
)


def test_summary_rows_speak_plainly() -> None:
    """No solver jargon in the card: the bound in words (not a ratio that reads as 100 %),
    the stages folded away and named in words."""
    _, plan = planned_with_tree()
    rows = dict(summary_model.summary_table(plan, plan.planned_peak_bytes * 2, "eager", None))
    assert rows["saving vs eager (allocated)"].endswith("(50.0 %)")
    # when the compared order is eager, the headline rows say the saving: no second row
    rows = dict(summary_model.summary_table(plan, plan.planned_peak_bytes * 2, "eager", None,
                                            show_eager=False))
    assert not [k for k in rows if k.startswith("saving vs")]
    assert rows["eager reserved (caching allocator)"] == "n/a"
    assert not [k for k in rows if k.startswith("stage") or "gap" in k]
    assert "above it" in rows["lower bound"] or "at it" in rows["lower bound"]
    details = dict(summary_model.solver_details(plan))
    assert "ordering the sub-tasks" in details
    assert "calls" not in " ".join(details.values())
    assert summary_model.headline(plan.planned_peak_bytes * 2, plan, "eager").endswith(
        "(50.0 %)")


def test_why_notes_explain_odd_results() -> None:


    g = tiny_train_step()
    plan = planner.run_planner(g, settings.PlanSettings(method="eager", time_limit_s=1.0))
    # the plan's curve above the compared one for most steps before its peak
    n = len(plan.order)
    after = np.arange(n, dtype=np.int64) + 100
    before = np.full(n, 50, np.int64)
    before[-1] = 10_000
    notes = summary_model.why_notes(g, plan, g.op_ids, "eager", before, after)
    assert any(w.startswith("The planned curve is above eager for 100 % of the steps")
               for w in notes)
    assert not [w for w in summary_model.why_notes(g, plan, g.op_ids, "eager", after, after)
                if "above" in w]


def test_why_notes_name_optimizer_ops_hoisted_before_the_loss() -> None:
    """On a traced Adam step: the ops that need nothing from the backward, run first."""


    g = load_graph(Path(__file__).resolve().parents[3] / "sample_graphs" /
                   "mlp-b8-steady.json.gz")
    loss = next(o.id for o in g.ops if o.phase.value == "loss")
    needs_loss: dict[str, bool] = {}

    def after_loss(op: str) -> bool:  # does op depend on the loss (through data edges)?
        if op not in needs_loss:
            needs_loss[op] = op == loss or any(
                p is not None and after_loss(p) for p in map(g.value_producer, g.op(op).inputs))
        return needs_loss[op]

    free = [o.id for o in g.ops if o.phase.value == "optimizer" and not after_loss(o.id)]
    assert free  # Adam's step counters and bias corrections
    order = (*free, *[o for o in g.op_ids if o not in free])
    plan = planner.run_planner(g, settings.PlanSettings(method="eager", time_limit_s=1.0))
    hoisted = dataclasses.replace(plan, order=order)
    curve = np.zeros(len(order), np.int64)
    notes = summary_model.why_notes(g, hoisted, g.op_ids, "eager", curve, curve)
    assert any(w.startswith(f"{len(free)} optimizer ops run before the loss") for w in notes)


def test_summary_does_not_repeat_the_eager_peak(planned: dict[str, Any]) -> None:
    g, pk = planned["graph"], planned["plan"]
    eager = str(summary_view.render_panels(g, pk, "eager"))
    assert eager.count("peak (allocated)") == 1
    other = str(summary_view.render_panels(g, pk, "lescea"))
    assert other.count("peak (allocated)") == 2  # LESCEA's and eager's


def test_headline_rows_name_both_savings_and_the_setting() -> None:
    from roam_core.planner.headline import Headline, NextStep

    h = Headline("steady", 100 * 2**20, 150 * 2**20, 100 * 2**20, 96 * 2**20,
                 reason="weights, gradients and optimizer state set the peak")
    nxt = NextStep(60 * 2**20, 0.002, 50 * 2**20, 0.004, 0.1, "h100-sxm")
    rows = dict(summary_model.headline_rows(h, "steady training", nxt))
    assert rows["saving vs eager allocated"].startswith("0 B")
    assert rows["saving vs eager reserved"].startswith("54.00 MiB (36.0 %)")
    assert "nvidia-smi" in rows["saving vs eager reserved"]
    assert rows["setting"] == "steady training"
    assert rows["why no saving"].startswith("weights, gradients")
    assert "roam plan --budget auto" in rows["next step"]
    assert "h100-sxm" in rows["next step"]
    saved = Headline("roam", 100 * 2**20, 120 * 2**20, 60 * 2**20, 62 * 2**20)
    rows = dict(summary_model.headline_rows(saved, "first step"))
    assert rows["saving vs eager allocated"].startswith("40.00 MiB (40.0 %)")
    assert "why no saving" not in rows


def test_the_summary_card_leads_with_the_headline(planned: dict[str, Any]) -> None:
    g, pk = planned["graph"], planned["plan"]
    text = str(summary_view.render_panels(g, pk, "eager"))
    assert "saving vs eager allocated" in text
    assert "saving vs eager reserved" in text
    assert "setting" in text
