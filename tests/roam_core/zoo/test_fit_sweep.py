"""What fits over a sweep: the memory-directed row, the local stop rule, the executor path,
``roam fit`` on a Hugging Face config with its precision default, and the sweep over world
sizes (in order here, or one task per configuration on a Dask ``LocalCluster`` started and
stopped by the test on 127.0.0.1, with the same answer)."""

from __future__ import annotations

import concurrent.futures as cf
import json

import pytest

from roam_core.planner.config import PlannerConfig
from roam_core.planner.whatfits import extra_time_pct, fit_row
from tests.builders import two_param_step


def test_the_memory_directed_row_decides_fits_like_the_full_row() -> None:
    g = two_param_step(act_bytes=1 << 20)
    cfg = PlannerConfig(workers=1, time_limit_s=1)
    full = fit_row(g, cfg, batch_size=1)
    for memory in (full.peak_bytes["roam"], full.peak_bytes["roam"] - 1,
                   full.peak_bytes["roam_recompute_25pct"]):
        row = fit_row(g, cfg, batch_size=1, memory_bytes=memory)
        assert row.fits(memory)["roam"] == (full.peak_bytes["roam"] <= memory)
        assert row.fits(memory)["eager_reserved"] == full.fits(memory)["eager_reserved"]
        for m in ("roam_recompute_5pct", "roam_recompute_25pct"):
            if row.fits(memory)[m]:
                assert row.extra_time_pct[m] <= float(m.split("_")[2][:-3])
    assert extra_time_pct(3, 60) == 5.0
    assert extra_time_pct(0.0, 0.0) == 0.0
    assert extra_time_pct(1e-6, 0.0) == 100.0  # a re-run on a step priced at 0 s is not free


torch = pytest.importorskip("torch")

from roam_core.commands.fit import fit_dict  # noqa: E402
from roam_core.model.parallel import ParallelSetting  # noqa: E402
from roam_core.zoo.fit_sweep import fit_sweep  # noqa: E402
from roam_core.zoo.sources import ModelSource  # noqa: E402


@pytest.mark.slow
def test_a_local_sweep_stops_where_nothing_fits_and_an_executor_agrees() -> None:
    src = ModelSource("mlp")
    kw = {"memory_bytes": 4 << 20, "precision": "fp32",
          "planner": PlannerConfig(workers=1, time_limit_s=1)}
    local = fit_sweep(src, [1, 2, 64, 128], [None], **kw)
    assert [r.batch_size for r in local][-1] < 128  # stopped at the first that nothing fits
    assert not any(local[-1].fits(4 << 20).values())
    with cf.ThreadPoolExecutor(2) as ex:
        remote = fit_sweep(src, [1, 2, 64, 128], [None], executor=ex, **kw)
    assert [r.to_dict() for r in remote] == [r.to_dict() for r in local]


def test_sources_default_transformers_to_bf16_mixed() -> None:
    assert ModelSource("gpt2").default_precision() == "bf16-mixed"
    assert ModelSource("resnet50").default_precision() == "fp32"
    assert ModelSource(hf_config={"model_type": "llama"}).default_precision() == "bf16-mixed"
    from roam_core.base.errors import TraceError

    with pytest.raises(TraceError, match="exactly one"):
        ModelSource()
    with pytest.raises(TraceError, match="unknown model 'resnet18'"):
        ModelSource("resnet18")


def test_a_rank_refuses_what_it_does_not_trace() -> None:
    from roam_core.base.errors import ConfigError
    from roam_core.commands.fit import default_fit_precision

    assert default_fit_precision(ModelSource("gpt2"), [ParallelSetting("fsdp", 8)]) == (
        "bf16-mixed")
    assert default_fit_precision(ModelSource("gpt2"), [ParallelSetting("ddp", 8)]) == "fp32"
    with pytest.raises(ConfigError, match="zoo models only"):
        ModelSource(hf_config={"model_type": "llama"}).trace(
            1, 8, parallel=ParallelSetting("fsdp", 2))
    for prec in ("bf16", "fp16-mixed"):
        with pytest.raises(ConfigError, match=f"precision '{prec}' with --parallel fsdp"):
            ModelSource("tiny_gpt").trace(1, 8, precision=prec,
                                          parallel=ParallelSetting("fsdp", 2))


@pytest.mark.slow
def test_roam_fit_on_a_hf_config_says_its_precision(capsys) -> None:
    pytest.importorskip("transformers")
    from roam_core.cli import main
    from tests.paths import REPO

    cfg = str(REPO / "docs" / "examples" / "hf" / "tiny-llama.json")
    assert main(["fit", "--hf-config", cfg, "--memory", "64MiB", "--batch-sizes", "1", "2",
                 "--seq-lens", "32", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["precision"] == "bf16-mixed"
    assert d["precision_default"] is True
    assert d["largest_by_seq_len"]["32"]["roam"] == 2
    assert "estimated seconds" in d["extra_time_estimate"]
    assert d["device_profile"] == "h100-sxm"
    assert all(c["device_profile"] == "h100-sxm" and c["step_seconds"] > 0
               for c in d["configs"])
    assert main(["fit", "--hf-config", cfg, "--memory", "64MiB", "--batch-sizes", "1",
                 "--seq-lens", "32", "--device-profile", "a100-80g"]) == 0
    out, err = capsys.readouterr()
    assert "bf16-mixed (the default for transformers" in err
    assert "roam + recompute ≤5% time" in out
    assert "on a100-80g" in out
    # an unknown profile: one line, exit 2, refused before tracing
    assert main(["fit", "--hf-config", cfg, "--memory", "64MiB", "--device-profile",
                 "tpu"]) == 2
    assert "tpu" in capsys.readouterr().err


SETTINGS = [ParallelSetting("fsdp", 2), ParallelSetting("fsdp", 8)]


@pytest.mark.slow
def test_world_sizes_on_dask_match_the_ordered_sweep() -> None:
    distributed = pytest.importorskip("distributed")
    kw: dict = {"precision": "fp32", "settings": SETTINGS}
    # the MLP: FSDP2 shards it like a transformer's blocks, and its configurations plan in
    # about a second (tiny_gpt's took 20 s each: its order polish), so the executor path
    # is what the test spends its time on
    local = fit_dict("mlp", 4 * 2**20, [1, 2], None, **kw)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  host="127.0.0.1", dashboard_address="127.0.0.1:0") as c, \
            distributed.Client(c) as client:
        remote = fit_dict("mlp", 4 * 2**20, [1, 2], None,
                          executor=client.get_executor(), **kw)
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


@pytest.mark.slow
def test_roam_fit_parallel_cli(capsys) -> None:  # type: ignore[no-untyped-def]
    from roam_core.cli import main

    assert main(["fit", "tiny_gpt", "--memory", "3MiB", "--batch-sizes", "1",
                 "--seq-lens", "16", "--parallel", "fsdp", "--world-size", "2", "4",
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["parallel"] == "fsdp"
    assert d["precision"] == "bf16-mixed"  # the transformers' default, as FSDP2 runs it
    assert [r["world_size"] for r in d["configs"]] == [2, 4]
    assert main(["fit", "tiny_gpt", "--memory", "3MiB", "--batch-sizes", "1",
                 "--seq-lens", "16", "--parallel", "ddp", "--world-size", "2"]) == 0
    out, err = capsys.readouterr()
    assert "precision: fp32 (the transformers' bf16-mixed is not traced" in err
    assert "per rank (" in out


@pytest.mark.slow
def test_roam_fit_merge_casts_keeps_eager_and_lowers_roam(capsys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``--merge-casts``: eager's column is the step as eager runs it (every cast), roam's
    plans the step with autocast's repeated casts made once."""
    pytest.importorskip("transformers")
    from roam_core.cli import main

    cfg = str(tmp_path / "llama.json")  # wide for its vocabulary: the casts count
    (tmp_path / "llama.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 128, "intermediate_size": 256,
        "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 256, "vocab_size": 32}))
    runs = {}
    for flag in ([], ["--merge-casts"]):
        assert main(["fit", "--hf-config", cfg, "--memory", "64MiB", "--batch-sizes", "4",
                     "--seq-lens", "64", "--json", *flag]) == 0
        runs[bool(flag)] = json.loads(capsys.readouterr().out)
    plain, merged = runs[False], runs[True]
    assert merged["merge_casts"] is True
    assert plain["merge_casts"] is False
    a, b = plain["configs"][0], merged["configs"][0]
    assert a["eager_reserved_bytes"] == b["eager_reserved_bytes"]
    assert b["graph"] == a["graph"]
    assert b["roam_arena_bytes"] < a["roam_arena_bytes"]
    assert main(["fit", "--hf-config", cfg, "--memory", "64MiB", "--batch-sizes", "1",
                 "--seq-lens", "32", "--merge-casts"]) == 0
    out = capsys.readouterr()
    assert "roam with repeated casts made once" in out.out
    assert "roam train ... --merge-casts" in out.err
