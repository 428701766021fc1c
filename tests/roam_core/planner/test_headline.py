"""The honest headline: saving vs eager allocated and vs eager reserved, named; the reason
and the next step when nothing is saved; the setting."""

from __future__ import annotations

from roam_core.formats.graph_io import load_graph
from roam_core.planner import make_plan
from roam_core.planner.config import PlannerConfig
from roam_core.planner.headline import (
    SETTING_TEXT,
    headline_lines,
    next_step,
    plan_headline,
    setting_text,
)
from tests.paths import SAMPLE_DIR

CFG = PlannerConfig(workers=1, layout_time_limit_s=2.0)


def test_steady_mlp_names_both_savings_and_why_nothing_is_saved() -> None:
    g = load_graph(SAMPLE_DIR / "mlp-b8-steady.json.gz")
    plan = make_plan(g, CFG)
    h = plan_headline(g, plan)
    assert h.setting == "steady"
    assert h.eager_reserved_bytes >= h.eager_allocated_bytes
    lines = headline_lines(h, next_step(g, plan, CFG))
    assert lines[0].startswith("saving vs eager allocated: ")
    assert lines[1].startswith("saving vs eager reserved: ")
    assert "nvidia-smi" in lines[1]
    assert lines[2] == f"setting: {SETTING_TEXT['steady']}"
    if h.saved_vs_allocated_bytes <= 0:  # the weights and AdamW state set this MLP's peak
        assert h.reason is not None
        assert any("saved vs eager allocated: weights, gradients" in x for x in lines)


def test_first_step_samples_say_so() -> None:
    from dataclasses import replace

    g = load_graph(SAMPLE_DIR / "teach_order-b256-steady.json.gz")
    g = replace(g, origin={**g.origin, "setting": "roam"})
    assert "first step" in setting_text(g)
    plan = make_plan(g, CFG)
    h = plan_headline(g, plan)
    assert h.setting == "roam"
    assert h.saved_vs_allocated_bytes > 0.3 * h.eager_allocated_bytes  # the order's saving
    assert h.reason is None
    assert "first step" in headline_lines(h)[2]


def test_plan_cli_text_leads_with_the_headline(tmp_path, capsys) -> None:
    from roam_core.cli import main

    path = SAMPLE_DIR / "teach_recompute-b256-steady.json.gz"
    out = tmp_path / "p.json"
    assert main(["plan", str(path), "-o", str(out), "--workers", "1", "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "saving vs eager allocated:" in text
    assert "saving vs eager reserved:" in text
    assert "setting: steady training" in text
    assert "little (under 1 %) saved vs eager allocated" in text
    assert "next step: a memory budget with recomputation" in text
    assert main(["plan", str(path), "-o", str(out), "--workers", "1", "--no-progress",
                 "--budget", "6MiB", "--json"]) == 0
    import json

    d = json.loads(capsys.readouterr().out)
    assert d["device_profile"] == "h100-sxm"
    assert d["extra_seconds"] > 0
    assert d["step_seconds"] > d["extra_seconds"]
    assert d["saved_vs_eager_reserved_bytes"] == d["eager_reserved_bytes"] - d["arena_bytes"]
