"""What fits: the sweep (cached rows), the figure, the answer, the job's messages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.analysis.settings import PlanSettings
from app.views.fit import data as fit_data
from app.views.fit import figure as fit_figure
from app.views.fit import model as fit_model
from app.views.fit import view as fit_view
from tests.builders import two_param_step

S = PlanSettings(time_limit_s=1)


def _fake_trace(model: str, b: int, t: int | None, merge: bool = False) -> Any:
    from dataclasses import replace

    g = two_param_step(act_bytes=8192 * b)
    return replace(g, name=f"{model}-b{b}-steady")


@pytest.mark.slow
def test_fit_sweep_caches_rows_and_answers(cache_dir: Path) -> None:
    calls: list[int] = []

    def trace(m: str, b: int, t: int | None, merge: bool = False) -> Any:
        calls.append(b)
        return _fake_trace(m, b, t)

    rows = fit_data.sweep("mlp", [4, 1, 2], [None], S, trace=trace).rows
    assert [r.batch_size for r in rows] == [1, 2, 4]
    assert all(r.peak_bytes["roam"] <= r.peak_bytes["eager_reserved"] for r in rows)
    assert fit_data.sweep("mlp", [1, 2, 4, 8], [None], S, trace=trace).rows[-1].batch_size == 8
    assert calls == [1, 2, 4, 8]  # the second sweep traced only batch 8
    assert [r.batch_size for r in fit_data.known_rows("mlp", S)] == [1, 2, 4, 8]
    fig = fit_figure.fit_figure(rows, 0.0001)
    names = [t.name for t in fig.data]
    assert "PyTorch eager (reserved)" in names
    assert "roam + recompute ≤25% time" in names
    hl = [s for s in fig.layout.shapes if s.type == "line"]
    assert sorted(s.y0 for s in hl) == sorted([0.0001, 24, 40, 80, 141])
    assert fig.layout.yaxis.type == "log"
    tiny = rows[0].peak_bytes["roam"] / 2**30
    ans = fit_model.fit_answer(rows, tiny)
    assert ans[1].startswith("roam: batch 1")
    assert "the largest tried" in fit_model.fit_answer(rows, 100)[0]
    with pytest.raises(Exception, match="too many"):
        fit_data.sweep("gpt2-xl", [1, 2, 4, 8], [None], S, trace=trace)


def test_fit_job_messages(cache_dir: Path) -> None:
    _, msg = fit_view.fit_job(print, 1, "mlp", "1 x", "", "auto", "none", 1, 1, 60, 1, 512)
    assert msg == "Sweep failed: batch sizes: 'x' is not a positive whole number"
    _out, msg = fit_view.fit_job(print, 1, "gpt2-xl", "1 2 4 8", "", "auto", "none", 1, 1, 60,
                                 1, 512)
    assert "too many" in msg
    assert "minutes" in msg
    fig, answer = fit_view.render_fit({"rows": [r.to_dict() for r in fit_data.sweep(
        "mlp", [1], [None], S, trace=_fake_trace).rows]}, 24)
    assert len(answer) == 5
    assert fig.data


def test_fit_answer_remembers_earlier_sweeps_and_cancel_keeps_rows(
        cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After sweeping batch 8 alone, the answer still knows batch 1 and 2 measured before;
    a cancelled sweep keeps the configurations it measured."""
    import functools
    import time

    from app.services import cancel_requests

    monkeypatch.setattr(fit_view, "sweep", functools.partial(fit_data.sweep,
                                                             trace=_fake_trace))
    fit_view.fit_job(print, 1, "mlp", "1 2", "", "fp32", "none", 1, 1, 60, 1, 512)
    out, msg = fit_view.fit_job(print, 1, "mlp", "8", "", "fp32", "none", 1, 1, 60, 1, 512)
    assert [r["batch_size"] for r in out["rows"]] == [8]
    assert [r.batch_size for r in fit_data.sweep_rows(out)] == [1, 2, 8]

    def progress(item: tuple) -> None:
        if item[0] == 1:  # the second configuration starts: cancel
            cancel_requests.request_cancel("page", 2, "fit")
            time.sleep(0.3)  # the job reads the request at most every 0.25 s

    out, msg = fit_view.fit_job(progress, 2, "mlp", "16 32 64", "", "fp32", "none", 1, 1, 60,
                                1, 512, "page")
    assert msg.startswith("cancelled: 2 of 3 configurations measured"), msg
    assert [r.batch_size for r in fit_data.sweep_rows(out)] == [1, 2, 8, 16, 32]
    assert fit_data.max_configs("gpt2") > 3


@pytest.mark.slow
def test_fit_sweep_traces_a_zoo_model(cache_dir: Path) -> None:
    pytest.importorskip("torch")
    rows = fit_data.sweep("mlp", [1, 4], [None], S).rows
    assert [r.graph_name for r in rows] == ["mlp-b1-steady", "mlp-b4-steady"]
    assert all(r.peak_bytes["roam"] < r.peak_bytes["eager_reserved"] for r in rows)


def test_fit_job_defaults_transformers_to_bf16_mixed(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    def fake_sweep(model, bs, ts, s, progress, cancel, precision,  # type: ignore[no-untyped-def]
                   parallel, merge_casts):
        seen.append(precision)
        return fit_data.Sweep([], False, 1)

    monkeypatch.setattr(fit_view, "sweep", fake_sweep)
    out, msg = fit_view.fit_job(print, 1, "gpt2", "1", "", "auto", "none", 1, 1, 60, 1, 512)
    assert msg == "swept gpt2 in bf16-mixed (the default for transformers): 0 configurations"
    assert out["precision"] == "bf16-mixed"
    _, msg = fit_view.fit_job(print, 1, "mlp", "1", "", "auto", "none", 1, 1, 60, 1, 512)
    assert "fp32 (the default for this model)" in msg
    fit_view.fit_job(print, 1, "gpt2", "1", "", "fp16-mixed", "none", 1, 1, 60, 1, 512)
    _, msg = fit_view.fit_job(print, 1, "gpt2", "1", "", "auto", "ddp", 2, 1, 60, 1, 512)
    assert "fp32 (ddp ranks trace in fp32 only)" in msg
    _, msg = fit_view.fit_job(print, 1, "gpt2", "1", "", "auto", "fsdp", 2, 1, 60, 1, 512)
    assert "per rank (fsdp, world size 2" in msg
    assert seen == ["bf16-mixed", "fp32", "fp16-mixed", "fp32", "bf16-mixed"]


def test_rows_are_found_with_settings_back_from_the_browser(cache_dir: Any) -> None:
    """Settings return from the page as JavaScript numbers (512.0 -> 512): the same rows."""
    from roam_core.planner.whatfits import FitRow

    s = PlanSettings(time_limit_s=2.0, alignment_bytes=512)
    row = FitRow(batch_size=3, seq_len=None, graph_name="mlp-b3", peak_bytes={})
    key = fit_data._row_key("mlp", 3, None, s)
    fit_data.state.put_json(key, row.to_dict())
    fit_data._remember("mlp", s, key)
    back = {**s.as_dict(), "time_limit_s": 2, "alignment_bytes": 512.0}
    assert [r.batch_size for r in fit_data.sweep_rows(
        {"model": "mlp", "settings": back, "rows": []})] == [3]


def test_world_size_selector(cache_dir: Path) -> None:
    """A world size needs FSDP or DDP; a parallel sweep is cached apart and answered per rank."""
    _, msg = fit_view.fit_job(print, 1, "mlp", "1", "", "auto", "none", 8, 1, 60, 1, 512)
    assert msg == "Sweep failed: world size 8: choose FSDP2 or DDP as the data parallelism"
    par = fit_view.parallel_choice("fsdp", 8)
    seen: list[int] = []

    def trace(m: str, b: int, t: int | None, merge: bool = False) -> Any:
        seen.append(b)
        return _fake_trace(m, b, t)

    fit_data.sweep("mlp", [1], [None], S, trace=trace)
    fit_data.sweep("mlp", [1], [None], S, trace=trace, parallel=par)
    assert seen == [1, 1]  # not the one-device row
    rows = fit_data.sweep("mlp", [1], [None], S, trace=trace, parallel=par).rows
    assert seen == [1, 1]
    # the rows known for one world are not those of another (nor of one device)
    assert len(fit_data.known_rows("mlp", S, parallel=par)) == 1
    assert fit_data.known_rows("mlp", S, parallel=fit_view.parallel_choice("fsdp", 2)) == []
    _fig, answer = fit_view.render_fit({"rows": [r.to_dict() for r in rows],
                                        "where": " per rank (fsdp, world size 8)"}, 24)
    assert "per rank (fsdp, world size 8)" in str(answer[0].children)


@pytest.mark.slow
def test_fit_sweep_of_one_rank(cache_dir: Path) -> None:
    pytest.importorskip("torch")
    rows = fit_data.sweep("tiny_gpt", [1], [16], S,
                          parallel=fit_view.parallel_choice("fsdp", 4)).rows
    assert [r.graph_name for r in rows] == ["tiny_gpt-b1-t16-steady-fsdp4"]


def test_merge_casts_follows_the_precision_the_sweep_traces_in(cache_dir: Path) -> None:
    """The checkbox is on offer where the sweep traces under autocast ("auto" resolved per
    model and data parallelism); a stale tick in fp32 is refused before any trace."""
    def offered(model: str, prec: str, kind: str = "none", world: int = 1) -> bool:
        options, value, _note = fit_view.merge_casts_for(model, prec, kind, world, ["merge"])
        assert value == (["merge"] if not options[0]["disabled"] else [])
        return not options[0]["disabled"]

    assert offered("tiny_gpt", "auto")  # transformers: bf16-mixed
    assert not offered("mlp", "auto")  # fp32
    assert offered("mlp", "fp16-mixed")
    assert not offered("gpt2", "bf16")
    assert not offered("gpt2", "auto", "ddp", 2)  # DDP ranks trace in fp32
    _, msg = fit_view.fit_job(print, 1, "mlp", "1", "", "fp32", "none", 1, 1, 60, 1, 512,
                              None, ["merge"])
    assert msg.startswith("Sweep failed: merge autocast's repeated casts: precision fp32")


@pytest.mark.slow
def test_fit_job_with_merged_casts_keeps_eager_and_plans_roam_merged(cache_dir: Path) -> None:
    """As ``roam fit --merge-casts``: eager's column is the step eager runs (every cast),
    roam's plans the merged step; the merged rows are cached apart and the answer says so."""
    pytest.importorskip("torch")
    outs = {}
    for merge in ([], ["merge"]):
        out, msg = fit_view.fit_job(print, 1, "tiny_llama", "2", "", "bf16-mixed", "none", 1,
                                    5, 60, 1, 512, None, merge)
        assert msg.startswith("swept tiny_llama in bf16-mixed"), msg
        outs[bool(merge)] = out
    assert "casts merged for roam" in msg
    plain, merged = (outs[k]["rows"][0] for k in (False, True))
    assert merged["peak_bytes"]["eager_reserved"] == plain["peak_bytes"]["eager_reserved"]
    assert merged["graph_name"] == plain["graph_name"]
    assert merged["peak_bytes"]["roam"] < plain["peak_bytes"]["roam"]
    assert outs[True]["merge_casts"] is True
    # each answer reads its own rows: the merged sweep's are not the plain sweep's
    assert [r.peak_bytes["roam"] for r in fit_data.sweep_rows(outs[True])] == [
        merged["peak_bytes"]["roam"]]
    _fig, answer = fit_view.render_fit(outs[True], 24)
    assert "roam with repeated casts made once" in str(answer[0].children)
