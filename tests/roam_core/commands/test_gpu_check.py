"""scripts/gpu_check.{sh,py}: the GPU machine's check, exercised on CPU (``--dry-run``).

The dry run takes the same code path as the GPU run: trace on the device, plan, an eager and
a planned training loop each in a fresh process, the numerics compared over every loss and
the final state, the summary written.  Only the CUDA measurements (peaks, snapshots) are
absent on CPU.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

from tests.paths import REPO

ROOT = REPO


def _driver():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts/gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_configs_and_goals() -> None:
    gc = _driver()
    assert gc.parse_config("gpt2:8:1024") == ("gpt2", 8, 1024)
    assert gc.parse_config("resnet50:32") == ("resnet50", 32, None)
    with pytest.raises(SystemExit):
        gc.parse_config("gpt2")
    assert set(gc.CUDA_CONFIGS) == {"resnet50:32", "gpt2:8:1024", "gpt2:8:1024@bf16-mixed",
                                    "gpt2-xl:1:1024"}
    assert gc.parse_config("gpt2:8:1024@bf16-mixed") == ("gpt2", 8, 1024)
    assert gc.config_precision("gpt2:8:1024@bf16-mixed") == "bf16-mixed"
    assert gc.config_precision("gpt2:8") == "fp32"
    assert gc.config_tag("gpt2", 8, 1024, "bf16-mixed") == "gpt2-b8-t1024-bf16-mixed"
    row = {"model": "gpt2-xl", "batch_size": 1, "device": "cuda", "arena_bytes": 1000 * 2**20,
           "extra_bytes": 0, "eager_peak_reserved_bytes": 1500 * 2**20,
           "planned_peak_reserved_bytes": 1010 * 2**20, "eager_step_seconds": 1.0,
           "planned_step_seconds": 0.9}
    g = gc.goals(row)
    assert g["goal_reserved_within_arena"]
    assert g["goal_saving_15pct"]
    assert g["goal_steps_per_s"]
    assert g["reserved_saving"] == pytest.approx(1 - 1010 / 1500)
    g = gc.goals(row | {"planned_peak_reserved_bytes": 1400 * 2**20, "planned_step_seconds": 2})
    assert not g["goal_reserved_within_arena"]
    assert not g["goal_saving_15pct"]
    assert not g["goal_steps_per_s"]
    assert "goal_saving_15pct" not in gc.goals(row | {"model": "gpt2"})
    cpu = gc.goals(row | {"device": "cpu", "planned_peak_reserved_bytes": None,
                          "eager_peak_reserved_bytes": None})
    assert "goal_reserved_within_arena" not in cpu
    assert "goal_steps_per_s" not in cpu


def test_loops_table_and_skip(tmp_path) -> None:
    gc = _driver()
    assert gc.parse_config(gc.LOOPS_CUDA)[0] == "gpt2"
    r = {"config": "gpt2-b2-t256", "max_grad_norm": 1.0, "accumulation_steps": 2,
         "other_batch_size": 1, "plans": 4, "calls": 12, "eager_step_seconds": 0.5,
         "planned_step_seconds": 0.4, "eager_peak_reserved_bytes": 3 * 2**20,
         "planned_peak_reserved_bytes": 2**20, "max_abs_diff": 0.0, "numerics_ok": True}
    gc.write_summary([], tmp_path, r)
    text = (tmp_path / "summary.md").read_text()
    assert "| gpt2-b2-t256 | 1.0 | 2 | 1 | 4 | 12 | 0.5000 | 0.4000 | 3 | 1 | 0 | yes |" in text
    gc.write_summary([], tmp_path, {"config": "x", "skipped": "not enough time left"})
    assert "x: not enough time left" in (tmp_path / "summary.md").read_text()


def test_compare_runs_exact_and_summarised(tmp_path) -> None:
    gc = _driver()
    state = {"w": torch.arange(6.0)}
    torch.save(state, tmp_path / "x.eager.state.pt")
    torch.save({"w": torch.arange(6.0) + 1e-7}, tmp_path / "x.planned.state.pt")
    e = {"losses": [1.0, 0.5], "state_exact": True}
    diff, ok, _ = gc.compare_runs(e, dict(e), tmp_path, "x", "cpu")
    assert not ok  # bit-equality on CPU
    assert 0 < diff < 1e-6
    diff, ok, _ = gc.compare_runs(e, dict(e), tmp_path, "x", "cuda")
    assert ok  # within rtol on CUDA
    big_e = {"losses": [1.0], "state_exact": False, "state_summary": {"w": [15.0, 55.0]}}
    big_p = big_e | {"state_summary": {"w": [15.0, 56.0]}}
    assert gc.compare_runs(big_e, dict(big_e), tmp_path, "y", "cuda")[1]
    assert not gc.compare_runs(big_e, big_p, tmp_path, "y", "cuda")[1]
    assert not gc.compare_runs(big_e, big_e | {"losses": [1.1]}, tmp_path, "y", "cuda")[1]


def test_fetch_wheels_script_targets_the_gpu_image() -> None:
    text = (ROOT / "scripts/fetch_gpu_wheels.sh").read_text()
    for flag in ("--only-binary=:all:", "--python-version 3.12", "manylinux2014_x86_64",
                 "ortools=="):
        assert flag in text
    assert "wheels/" in (ROOT / ".gitignore").read_text()
    sh = (ROOT / "scripts/gpu_check.sh").read_text()
    assert "--no-index" in sh  # never a registry on the GPU machine
    assert "pip install -q \"torch" not in sh
    assert "ortools>=" not in sh


def test_gpu_check_shell_script_arguments() -> None:
    script = ROOT / "scripts/gpu_check.sh"
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
    bad = subprocess.run(["bash", str(script), "--bogus"], capture_output=True, text=True,
                         check=False)
    assert bad.returncode == 2
    assert "unknown argument" in bad.stderr
    ok = subprocess.run(["bash", str(script), "--help"], capture_output=True, text=True,
                        check=False)
    assert ok.returncode == 0
    assert "--dry-run" in ok.stdout


@pytest.mark.slow
def test_gpu_check_dry_run_end_to_end(tmp_path) -> None:
    """``scripts/gpu_check.sh --dry-run``: the device profile measured, then trace, plan,
    two fresh training processes, the numerics bit-equal over every step and the final
    state, the summary written."""
    env = dict(os.environ, ROAM_PYTHON=sys.executable)
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts/gpu_check.sh"), "--dry-run", "--no-export", "--no-fsdp",
         "--out", str(tmp_path),
         "--", "--configs", "mlp:4", "--steps", "3", "--time-limit", "2", "--loops",
         "mlp:4", "--loop-steps", "3"],
        env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (row,) = json.loads((tmp_path / "summary.json").read_text())
    assert row["numerics_ok"], row
    assert row["max_abs_diff"] == 0.0
    assert row["steps"] == 3
    assert row["numerics_compared"].startswith("losses and final state")
    for suffix in ("graph.json.gz", "plan.json", "plan.pickle", "eager.json", "planned.json",
                   "report.json"):
        assert (tmp_path / f"mlp-b4.{suffix}").exists(), suffix
    planned = json.loads((tmp_path / "mlp-b4.planned.json").read_text())
    assert planned["arena_bytes"] == row["arena_bytes"]
    assert len(planned["losses"]) == 3
    assert "| mlp-b4 |" in (tmp_path / "summary.md").read_text()
    # the loops check: clipping, accumulation and two shapes, bit-equal on CPU
    loops = json.loads((tmp_path / "loops.json").read_text())
    assert loops["numerics_ok"], loops
    assert loops["max_abs_diff"] == 0.0
    assert (loops["max_grad_norm"], loops["accumulation_steps"]) == (1.0, 2)
    assert loops["plans"] == 4  # two shapes, each accumulating and updating
    assert "## Loops: clipping, accumulation, two shapes" in (tmp_path / "summary.md").read_text()
    # the device profile measured first (the CPU here, the GPU on the device)
    from roam_core.formats.device_profile_io import load_profile_file

    assert load_profile_file(tmp_path / "device_profile.json").memory_bandwidth_bytes_per_s > 0


@pytest.mark.slow
def test_gpu_check_dry_run_exported_policy(tmp_path) -> None:
    """``--export-only --dry-run``: the exported checkpointing policy's part of the check
    (benchmarks/export_bench.py on tiny_gpt) runs and writes its report."""
    env = dict(os.environ, ROAM_PYTHON=sys.executable)
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts/gpu_check.sh"), "--dry-run", "--export-only", "--out",
         str(tmp_path)], env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (row,) = json.loads((tmp_path / "export" / "export_policy.json").read_text())["rows"]
    assert row["exported_losses_equal"]
    assert row["modules_wrapped"] >= 1
    assert "| tiny_gpt b4 t64 |" in (tmp_path / "export" / "export_policy.md").read_text()


@pytest.mark.slow
def test_gpu_check_dry_run_fsdp_peaks(tmp_path) -> None:
    """``--fsdp-only --dry-run``: FSDP2's per-rank peaks on a fake process group (tiny_gpt,
    tiny_llama at W=8 on CPU): the peer's, roam's eager (with and without FSDP2's holds) and
    planned peaks; no measured peak without a GPU."""
    env = dict(os.environ, ROAM_PYTHON=sys.executable)
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts/gpu_check.sh"), "--dry-run", "--fsdp-only", "--out",
         str(tmp_path)], env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads((tmp_path / "fsdp" / "fsdp_peaks.json").read_text())
    assert [r["config"] for r in rows] == ["tiny_gpt:2:32", "tiny_llama:2:32"]
    for r in rows:
        assert r["measured_eager_peak_bytes"] is None
        assert r["roam_planned_peak_bytes"] <= r["roam_eager_sim_peak_bytes"]
        assert r["roam_eager_sim_peak_bytes"] < r["roam_fsdp2_eager_peak_bytes"]
        assert 0.9 < r["roam_fsdp2_eager_peak_bytes"] / r["peer_peak_bytes"] < 1.1
    assert "| tiny_llama:2:32 | 8 | cpu |" in (tmp_path / "fsdp" / "fsdp_peaks.md").read_text()
