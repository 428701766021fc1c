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


def _fake_trace(model: str, b: int, t: int | None) -> Any:
    from dataclasses import replace

    g = two_param_step(act_bytes=8192 * b)
    return replace(g, name=f"{model}-b{b}-steady")


@pytest.mark.slow
def test_fit_sweep_caches_rows_and_answers(cache_dir: Path) -> None:
    calls: list[int] = []

    def trace(m: str, b: int, t: int | None) -> Any:
        calls.append(b)
        return _fake_trace(m, b, t)

    rows = fit_data.sweep("mlp", [4, 1, 2], [None], S, trace=trace)
    assert [r.batch_size for r in rows] == [1, 2, 4]
    assert all(r.peak_bytes["roam"] <= r.peak_bytes["eager_reserved"] for r in rows)
    assert fit_data.sweep("mlp", [1, 2, 4, 8], [None], S, trace=trace)[-1].batch_size == 8
    assert calls == [1, 2, 4, 8]  # the second sweep traced only batch 8
    fig = fit_figure.fit_figure(rows, 0.0001)
    names = [t.name for t in fig.data]
    assert "PyTorch eager (reserved)" in names
    assert "roam + recompute ≤25% FLOPs" in names
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
    _, msg = fit_view.fit_job(print, 1, "mlp", "1 x", "", "none", 1, 1, 60, 1, 512)
    assert msg == "Sweep failed: batch sizes: 'x' is not a positive whole number"
    _out, msg = fit_view.fit_job(print, 1, "gpt2-xl", "1 2 4 8", "", "none", 1, 1, 60,
                                   1, 512)
    assert "too many" in msg
    assert "minutes" in msg
    fig, answer = fit_view.render_fit({"rows": [r.to_dict() for r in fit_data.sweep(
        "mlp", [1], [None], S, trace=_fake_trace)]}, 24)
    assert len(answer) == 5
    assert fig.data


@pytest.mark.slow
def test_fit_sweep_traces_a_zoo_model(cache_dir: Path) -> None:
    pytest.importorskip("torch")
    rows = fit_data.sweep("mlp", [1, 4], [None], S)
    assert [r.graph_name for r in rows] == ["mlp-b1-steady", "mlp-b4-steady"]
    assert all(r.peak_bytes["roam"] < r.peak_bytes["eager_reserved"] for r in rows)


def test_world_size_selector(cache_dir: Path) -> None:
    """A world size needs FSDP or DDP; a parallel sweep is cached apart and answered per rank."""
    _, msg = fit_view.fit_job(print, 1, "mlp", "1", "", "none", 8, 1, 60, 1, 512)
    assert msg == "Sweep failed: world size 8: choose FSDP2 or DDP as the data parallelism"
    par = fit_view.parallel_choice("fsdp", 8)
    seen: list[int] = []

    def trace(m: str, b: int, t: int | None) -> Any:
        seen.append(b)
        return _fake_trace(m, b, t)

    fit_data.sweep("mlp", [1], [None], S, trace=trace)
    fit_data.sweep("mlp", [1], [None], S, trace=trace, parallel=par)
    assert seen == [1, 1]  # not the one-device row
    rows = fit_data.sweep("mlp", [1], [None], S, trace=trace, parallel=par)
    assert seen == [1, 1]
    _fig, answer = fit_view.render_fit({"rows": [r.to_dict() for r in rows],
                                        "parallel": " per rank (fsdp, world size 8)"}, 24)
    assert "per rank (fsdp, world size 8)" in str(answer[0].children)


@pytest.mark.slow
def test_fit_sweep_of_one_rank(cache_dir: Path) -> None:
    pytest.importorskip("torch")
    rows = fit_data.sweep("tiny_gpt", [1], [16], S, parallel=fit_view.parallel_choice("fsdp", 4))
    assert [r.graph_name for r in rows] == ["tiny_gpt-b1-t16-steady-fsdp4"]
