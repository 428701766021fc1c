"""``roam export-policy GRAPH PLAN -o policy.json``."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import roam_core as rc
from roam_core.cli import main
from roam_core.model.plan import Plan
from roam_core.model.recompute_ops import recompute_ops_for
from tests.paths import SAMPLE_DIR

TINY_GPT = SAMPLE_DIR / "tiny_gpt-b2-t32-steady.json.gz"


def _plan_file(tmp_path: Path, drops: list[str]) -> Path:
    g = rc.load_graph(TINY_GPT)
    plan = Plan(g.fingerprint(), g.name, "test", order=(), offsets={}, alignment_bytes=512,
                arena_bytes=0, planned_peak_bytes=1 << 20, resident_bytes=0,
                baseline_peak_bytes=0, lower_bound_bytes=0,
                recompute=recompute_ops_for(g, drops))
    path = tmp_path / "plan.json"
    rc.save_plan(plan, path)
    return path


def test_export_policy_writes_the_decisions_and_one_line(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    # a graph of a custom model: wrappable modules are guessed from the graph
    custom = tmp_path / "g.json"
    rc.save_graph(dataclasses.replace(rc.load_graph(TINY_GPT), origin={"source": "custom"}),
                  custom)
    plan = _plan_file(tmp_path, ["gelu", "add_2"])
    out = tmp_path / "policy.json"
    assert main(["export-policy", str(custom), str(plan), "-o", str(out)]) == 0
    line = capsys.readouterr().out.strip()
    assert "\n" not in line
    assert "1 drop(s) not expressible" in line
    assert str(out) in line
    assert "guessed from the graph" in line
    d = json.loads(out.read_text())
    assert list(d["modules"]) == ["h.0"]
    assert d["unexpressed"][0]["storage"] == "add_2"


@pytest.mark.slow
def test_export_policy_reads_wrappable_modules_from_the_zoo_model(tmp_path: Path,
                                                                  capsys) -> None:  # type: ignore[no-untyped-def]
    plan = _plan_file(tmp_path, ["gelu", "add_2"])
    out = tmp_path / "policy.json"
    assert main(["export-policy", str(TINY_GPT), str(plan), "-o", str(out), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["modules"] == ["h.0"]
    assert s["unexpressed_bytes"] == 16384
    assert s["wrappable_from_model"] is True  # the zoo model was rebuilt on meta


def test_export_policy_bad_input_exits_2(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    other = SAMPLE_DIR / "mlp-b8-steady.json.gz"
    plan = _plan_file(tmp_path, ["gelu"])
    assert main(["export-policy", str(other), str(plan), "-o", str(tmp_path / "p.json")]) == 2
    assert "made for graph" in capsys.readouterr().err
    assert not (tmp_path / "p.json").exists()
    with pytest.raises(SystemExit):
        main(["export-policy", str(TINY_GPT), str(plan), "-o", "x.json", "--max-blocks", "0"])
