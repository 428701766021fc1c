"""``roam calibrate``: the micro-benchmarks give a profile that reproduces them."""

from __future__ import annotations

import json

import pytest
import torch

from roam_core.cli import main
from roam_core.formats.device_profile_io import load_profile_file, resolve_profile
from roam_core.model.cost_model import OpClass, roofline_seconds
from roam_core.runtime import calibrate as cal

SMALL = cal.CalibrationSizes(matmul_n=64, conv_batch=1, conv_channels=4, conv_side=8,
                             elementwise_elements=4096, launch_calls=10, attention_batch=1,
                             attention_heads=2, attention_seq=16, attention_head_dim=8,
                             norm_rows=16, norm_width=32, norm_batch=1)


def test_a_measured_profile_reproduces_its_measurements() -> None:
    m = cal.measure("cpu", seconds=0.05, sizes=SMALL)
    assert m.device == "cpu"
    assert m.threads == torch.get_num_threads()
    assert all(v > 0 for v in (*m.matmul_flops_per_s.values(), *m.conv_flops_per_s.values(),
                               m.elementwise_bytes_per_s, m.transcendental_bytes_per_s,
                               m.copy_bytes_per_s, m.launch_s))
    p = cal.profile_from(m, seconds=0.05)
    assert p.name == "cpu"
    assert p.calibrated["threads"] == m.threads
    n = SMALL.matmul_n
    t_mm = 2 * n**3 / m.matmul_flops_per_s["float32"]
    assert roofline_seconds(p, OpClass.MATMUL, "float32", flops=2 * n**3, bytes_moved=0) \
        == pytest.approx(t_mm + m.launch_s)
    nbytes = 3 * 4 * SMALL.elementwise_elements
    assert roofline_seconds(p, OpClass.ELEMENTWISE, "float32", flops=0, bytes_moved=nbytes) \
        == pytest.approx(nbytes / m.elementwise_bytes_per_s + m.launch_s)
    tbytes = 2 * 4 * SMALL.elementwise_elements
    assert roofline_seconds(p, OpClass.TRANSCENDENTAL, "float32", flops=0,
                            bytes_moved=tbytes) \
        == pytest.approx(tbytes / m.transcendental_bytes_per_s + m.launch_s)
    assert roofline_seconds(p, OpClass.CONV, "float32", flops=10**9, bytes_moved=0) \
        == pytest.approx(1e9 / m.conv_flops_per_s["float32"] + m.launch_s)
    att = m.attention_flops_per_s["float32"]
    assert roofline_seconds(p, OpClass.ATTENTION, "float32", flops=10**9, bytes_moved=0) \
        == pytest.approx(1e9 / att + m.launch_s)
    for cls, rate in ((OpClass.NORM, m.norm_bytes_per_s),
                      (OpClass.BATCH_NORM, m.batch_norm_bytes_per_s)):
        assert rate is not None
        assert rate > 0
        assert roofline_seconds(p, cls, "float32", flops=0, bytes_moved=nbytes) \
            == pytest.approx(nbytes / rate + m.launch_s)
    measured = p.calibrated["measured"]
    assert {"attention_flops_per_s", "norm_bytes_per_s", "batch_norm_bytes_per_s"} \
        <= set(measured)
    assert {"norm", "batch_norm"} <= set(p.efficiency)
    # dtypes CPU does not measure take float32's rate
    assert p.rate_flops_per_s(OpClass.MATMUL, "bfloat16") == m.matmul_flops_per_s["float32"]


def test_the_cpu_clock_measures_this_process_only() -> None:
    from roam_core.base.errors import ConfigError

    m = cal.measure("cpu", seconds=0.02, sizes=SMALL, clock="cpu")
    assert m.clock == "cpu"
    assert cal.profile_from(m).calibrated["clock"] == "cpu"
    with pytest.raises(ConfigError):
        cal.measure("cpu", seconds=0.02, sizes=SMALL, clock="gpu")


def test_the_gpu_path_runs_on_cpu_through_the_same_functions() -> None:
    """What ``--device cuda`` measures (three matmul dtypes) runs here on the CPU."""
    m = cal.measure("cpu", seconds=0.02, sizes=SMALL,
                    dtypes=("float32", "bfloat16", "float16"))
    p = cal.profile_from(m, name="cuda")
    assert set(p.matmul_flops_per_s) == {"float32", "bfloat16", "float16"}
    assert p.name == "cuda"


def test_cuda_without_a_gpu_is_a_clear_error() -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert main(["calibrate", "--device", "cuda", "--seconds", "0.1"]) == 2


def test_cli_writes_the_profile_that_plan_uses(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("ROAM_CACHE_DIR", str(tmp_path))
    real = cal.calibrate
    monkeypatch.setattr(cal, "calibrate", lambda device, seconds, clock: real(
        device, seconds=0.05, sizes=SMALL, clock=clock))
    assert main(["calibrate", "--seconds", "0.1"]) == 0
    out = capsys.readouterr().out
    assert "matmul float32" in out
    assert "--device-profile cpu" in out
    assert "batch norm" in out
    assert "attention float32" in out
    prof = resolve_profile("cpu")
    assert prof.calibrated["device"] == "cpu"
    assert main(["calibrate", "--seconds", "0.1", "--json", "-o", str(tmp_path / "p.json")]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "cpu"
    assert load_profile_file(tmp_path / "p.json").name == "cpu"


@pytest.mark.gpu
def test_calibrate_cuda_measures_the_tensor_cores() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    p = cal.calibrate("cuda", seconds=2.0)
    assert p.matmul_flops_per_s["bfloat16"] > p.matmul_flops_per_s["float32"]


def test_each_transcendental_function_gets_its_own_rate() -> None:
    m = cal.measure("cpu", seconds=0.05, sizes=SMALL)
    assert set(m.function_bytes_per_s) == set(cal.FUNCTIONS)
    p = cal.profile_from(m)
    nbytes = 8 * SMALL.elementwise_elements
    for f, rate in m.function_bytes_per_s.items():
        for target in (f, f"{f}_backward"):  # a backward takes its forward's rate
            assert roofline_seconds(p, OpClass.TRANSCENDENTAL, "float32", flops=0,
                                    bytes_moved=nbytes, function=target) \
                == pytest.approx(nbytes / rate + m.launch_s)
    # a function not measured takes tanh's rate
    assert roofline_seconds(p, OpClass.TRANSCENDENTAL, "float32", flops=0,
                            bytes_moved=nbytes, function="erf") \
        == pytest.approx(nbytes / m.transcendental_bytes_per_s + m.launch_s)
