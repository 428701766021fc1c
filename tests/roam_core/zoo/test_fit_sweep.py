"""``roam fit``'s sweep over world sizes and batch sizes: in order here, or one task per
configuration on a Dask ``LocalCluster`` (started and stopped by the test on 127.0.0.1),
with the same answer."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from roam_core.model.parallel import ParallelSetting
from roam_core.zoo.fit_sweep import fit_sweep

pytestmark = pytest.mark.slow

SETTINGS = [ParallelSetting("fsdp", 2), ParallelSetting("fsdp", 8)]


def test_world_sizes_on_dask_match_the_ordered_sweep() -> None:
    distributed = pytest.importorskip("distributed")
    local = fit_sweep("tiny_gpt", 3 * 2**20, [1, 2], [16], SETTINGS)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  host="127.0.0.1", dashboard_address="127.0.0.1:0") as c, \
            distributed.Client(c) as client:
        remote = fit_sweep("tiny_gpt", 3 * 2**20, [1, 2], [16], SETTINGS,
                           executor=client.get_executor())
    # the same configurations and eager figures; roam's arenas may differ by a few KiB
    # between two runs of the planner on a loaded machine (wall-clock stages), here or there
    keys = ("world_size", "batch_size", "seq_len", "eager_reserved_bytes", "step_flops")
    assert [[r[k] for k in keys] for r in local["configs"]] == [
        [r[k] for k in keys] for r in remote["configs"]]
    for r in local["configs"] + remote["configs"]:
        assert r["roam_arena_bytes"] <= r["eager_reserved_bytes"]
    assert sorted({r["world_size"] for r in local["configs"]}) == [2, 8]
    assert set(local["largest_by_world_size"]) == {"2", "8"}
    # more ranks: less memory per rank for the same per-rank batch
    by = {(r["world_size"], r["batch_size"]): r["roam_arena_bytes"] for r in local["configs"]}
    assert by[(8, 1)] < by[(2, 1)]


def test_roam_fit_parallel_cli(capsys) -> None:  # type: ignore[no-untyped-def]
    from roam_core.cli import main

    assert main(["fit", "tiny_gpt", "--memory", "3MiB", "--batch-sizes", "1",
                 "--seq-lens", "16", "--parallel", "fsdp", "--world-size", "2", "4",
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["parallel"] == "fsdp"
    assert [r["world_size"] for r in d["configs"]] == [2, 4]
