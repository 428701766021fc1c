"""Real ranks: 2 gloo processes on 127.0.0.1 run the planned step of one rank beside torch's
FSDP2 / DDP from the same weights (started and stopped by each test)."""

from __future__ import annotations

import json
import multiprocessing

import pytest

torch = pytest.importorskip("torch")

from roam_core.base.errors import ExecutorError  # noqa: E402
from roam_core.model.parallel import ParallelSetting  # noqa: E402
from roam_core.runtime.rank_launch import compare_parallel_training  # noqa: E402

pytestmark = pytest.mark.slow


def _no_children() -> bool:
    return not multiprocessing.active_children()


@pytest.mark.parametrize(("kind", "model"), [("fsdp", "tiny_gpt"), ("ddp", "mlp")])
def test_planned_ranks_equal_torch_bit_for_bit(kind: str, model: str) -> None:
    r = compare_parallel_training(model, 2, 16 if model == "tiny_gpt" else None,
                                  parallel=ParallelSetting(kind, 2), steps=3,
                                  planner_time_limit_s=5)
    assert r["max_abs_diff"] == 0.0
    assert r["numerics_ok"]
    assert [x["rank"] for x in r["ranks"]] == [0, 1]
    for x in r["ranks"]:
        assert x["max_abs_diff"] == 0.0
        assert len(x["losses_planned"]) == 3
        assert any("c10d" in t for t in x["fallback_targets"])  # the collectives ran
    # each rank trains on its own batches
    assert r["ranks"][0]["losses_eager"] != r["ranks"][1]["losses_eager"]
    assert _no_children()


def test_bf16_mixed_fsdp_equals_torch() -> None:
    r = compare_parallel_training("tiny_llama", 2, 16, parallel=ParallelSetting("fsdp", 2),
                                  precision="bf16-mixed", steps=3, planner_time_limit_s=5)
    assert r["max_abs_diff"] == 0.0


def test_a_failing_rank_stops_all_with_a_clear_error() -> None:
    with pytest.raises(ExecutorError, match=r"rank 1 failed, all ranks stopped: .*on purpose"):
        compare_parallel_training("mlp", 2, None, parallel=ParallelSetting("fsdp", 2),
                                  steps=2, planner_time_limit_s=5, fail_rank=1,
                                  timeout_s=300)
    assert _no_children()


def test_roam_train_parallel_json(capsys) -> None:  # type: ignore[no-untyped-def]
    from roam_core.cli import main

    rc = main(["train", "mlp", "--parallel", "ddp", "--world-size", "2", "--device", "cpu",
               "--steps", "3", "--time-limit", "5", "--json"])
    d = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert d["max_abs_diff"] == 0.0
    assert d["world_size"] == 2
    assert d["parallel"] == "ddp"
    assert len(d["ranks"]) == 2
    assert _no_children()
