"""The cost model against hand-computed rooflines, and device profiles by name and file."""

from __future__ import annotations

import json

import pytest

from roam_core.base.errors import ConfigError
from roam_core.formats.device_profile_io import (
    load_profile_file,
    profile_from_dict,
    profile_path,
    profile_to_dict,
    resolve_profile,
    save_profile,
)
from roam_core.model.cost_model import (
    DeviceProfile,
    OpClass,
    op_class,
    op_dtype,
    op_seconds,
    roofline_seconds,
    step_seconds,
)
from roam_core.model.device_profiles import BUILTIN_PROFILES, DEFAULT_PROFILE
from roam_core.model.graph import Graph, Op, OpId, Phase, Tensor, TensorId, TensorKind
from roam_core.recompute.config import RecomputeConfig
from roam_core.recompute.objective import rerun_costs

H100 = BUILTIN_PROFILES["h100-sxm"]
MiB = 2**20


def _graph(dtype: str = "float32") -> Graph:
    """x (input) -> mm (1 GFLOP) -> relu -> view -> conv; sizes of 4 MiB."""
    def t(tid: str, producer: str | None, kind: TensorKind = TensorKind.ACTIVATION) -> Tensor:
        return Tensor(TensorId(tid), 4 * MiB, dtype, (MiB,), kind,
                      None if producer is None else OpId(producer))

    ops = [Op(OpId("mm"), "aten.mm.default", Phase.FORWARD, ("x", "w"), ("a",),
              flops=10**9, bytes_read=8 * MiB, bytes_written=4 * MiB),
           Op(OpId("relu"), "aten.tanh.default", Phase.FORWARD, ("a",), ("b",),
              flops=0, bytes_read=4 * MiB, bytes_written=4 * MiB),
           Op(OpId("view"), "aten.view.default", Phase.FORWARD, ("b",), ("bv",),
              flops=0, bytes_read=0, bytes_written=0),
           Op(OpId("conv"), "aten.convolution.default", Phase.FORWARD, ("bv", "w"), ("c",),
              flops=4 * 10**9, bytes_read=8 * MiB, bytes_written=4 * MiB),
           Op(OpId("cp"), "aten.clone.default", Phase.FORWARD, ("c",), ("d",),
              flops=0, bytes_read=4 * MiB, bytes_written=4 * MiB)]
    from roam_core.model.graph import Alias

    return Graph.build(ops, [t("x", None, TensorKind.INPUT), t("w", None, TensorKind.PARAMETER),
                             t("a", "mm"), t("b", "relu"), t("c", "conv"), t("d", "cp")],
                       [Alias("bv", TensorId("b"), OpId("view"))], outputs=[TensorId("d")])


def test_op_classes_and_dtypes() -> None:
    g = _graph()
    assert [op_class(g, o) for o in g.ops] == [OpClass.MATMUL, OpClass.TRANSCENDENTAL,
                                               OpClass.VIEW, OpClass.CONV, OpClass.COPY]
    assert op_dtype(g, g.op("mm")) == "float32"
    assert op_dtype(_graph("bfloat16"), g.op("mm")) == "bfloat16"


def test_h100_rooflines_by_hand() -> None:
    g = _graph()
    bw = 3350e9 * 0.85
    launch = 5e-6
    # float32 matmul: non-tensor FP32 (67 TFLOP/s) at 70 %; compute-bound
    mm = max(1e9 / (67e12 * 0.7), 12 * MiB / bw) + launch
    assert op_seconds(g, g.op("mm"), H100) == pytest.approx(mm)
    # tanh: bandwidth-bound on a GPU (elementwise efficiency), 8 MiB moved
    assert op_seconds(g, g.op("relu"), H100) == pytest.approx(8 * MiB / bw + launch)
    # a view launches nothing
    assert op_seconds(g, g.op("view"), H100) == 0.0
    # float32 convolution: cuDNN's TF32 (494.5 TFLOP/s) at 60 %
    conv = max(4e9 / (494.5e12 * 0.6), 12 * MiB / bw) + launch
    assert op_seconds(g, g.op("conv"), H100) == pytest.approx(conv)
    assert op_seconds(g, g.op("cp"), H100) == pytest.approx(8 * MiB / bw + launch)
    assert step_seconds(g, H100) == pytest.approx(mm + conv + 2 * (8 * MiB / bw + launch))
    # bfloat16 matmul: tensor cores (989.5 TFLOP/s); now the bytes bind
    gb = _graph("bfloat16")
    assert op_seconds(gb, gb.op("mm"), H100) == pytest.approx(
        max(1e9 / (989.5e12 * 0.7), 12 * MiB / bw) + launch)


def test_published_profiles_are_the_datasheets_dense_figures() -> None:
    a100, h200 = BUILTIN_PROFILES["a100-80g"], BUILTIN_PROFILES["h200"]
    assert a100.matmul_flops_per_s["bfloat16"] == 312e12
    assert a100.memory_bandwidth_bytes_per_s == 2039e9
    assert H100.matmul_flops_per_s["bfloat16"] == 989.5e12
    assert H100.memory_bandwidth_bytes_per_s == 3350e9
    assert h200.memory_bandwidth_bytes_per_s == 4800e9
    assert h200.matmul_flops_per_s == H100.matmul_flops_per_s
    assert DEFAULT_PROFILE == "h100-sxm"
    # an elementwise op of 1 GiB is 1.41x faster on H200 than H100 (bandwidth ratio)
    t = [roofline_seconds(p, OpClass.ELEMENTWISE, "float32", flops=0, bytes_moved=2**30)
         for p in (H100, h200)]
    assert t[0] > t[1]


@pytest.mark.parametrize("bad", [
    {"matmul_flops_per_s": {"bfloat16": 1.0}},
    {"memory_bandwidth_bytes_per_s": 0.0},
    {"launch_overhead_s": -1.0},
    {"efficiency": {"matmul": 1.5}},
    {"name": ""},
])
def test_profiles_refuse_bad_figures(bad: dict) -> None:
    kw = {"name": "x", "description": "", "matmul_flops_per_s": {"float32": 1.0},
          "vector_flops_per_s": 1.0, "memory_bandwidth_bytes_per_s": 1.0,
          "launch_overhead_s": 0.0, **bad}
    with pytest.raises(ConfigError):
        DeviceProfile(**kw)


def test_profile_files_round_trip_and_resolve(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ROAM_CACHE_DIR", str(tmp_path))
    assert resolve_profile("h200") is BUILTIN_PROFILES["h200"]
    with pytest.raises(ConfigError, match="roam calibrate"):
        resolve_profile("cpu")
    with pytest.raises(ConfigError, match="roam calibrate --device cuda"):
        resolve_profile("cuda")
    with pytest.raises(ConfigError, match=r"unknown device profile 'tpu'.*h100-sxm"):
        resolve_profile("tpu")
    cpu = DeviceProfile("cpu", "this machine", {"float32": 1e11}, 1e11, 1e10, 3e-6,
                        {"elementwise": 0.5}, calibrated={"threads": 2})
    path = save_profile(cpu, profile_path("cpu"))
    assert path.parent == tmp_path / "device_profiles"
    assert resolve_profile("cpu") == cpu
    assert load_profile_file(path) == cpu
    assert resolve_profile(str(path)) == cpu
    assert profile_from_dict(profile_to_dict(H100)) == H100
    d = profile_to_dict(cpu)
    del d["launch_overhead_s"]
    with pytest.raises(ConfigError, match="missing field 'launch_overhead_s'"):
        profile_from_dict(d)
    path.write_text(json.dumps({"format": "other"}))
    with pytest.raises(ConfigError, match="not a roam device profile"):
        resolve_profile("cpu")


def test_rerun_costs_time_and_flops_objectives() -> None:
    g = _graph()
    t = rerun_costs(g, RecomputeConfig())
    assert t.objective == "time"
    assert t.profile is H100
    assert t.unit == "s"
    assert t.cost == t.seconds
    assert t.cost[OpId("relu")] == pytest.approx(op_seconds(g, g.op("relu"), H100))
    f = rerun_costs(g, RecomputeConfig(objective="flops", bytes_weight=2.0))
    assert f.cost[OpId("mm")] == 10**9 + 2.0 * 12 * MiB
    assert f.seconds == t.seconds  # seconds are reported whatever the objective
    assert t.integer(2.5e-6) == 2500  # nanoseconds for CP-SAT
    with pytest.raises(ConfigError):
        RecomputeConfig(objective="energy")
    with pytest.raises(ConfigError, match="unknown device profile"):
        rerun_costs(g, RecomputeConfig(device_profile="nope"))


def _one_op_graph(target: str, flops: int = 0) -> Graph:
    x = Tensor(TensorId("x"), 4 * MiB, "float32", (MiB,), TensorKind.INPUT, None)
    y = Tensor(TensorId("y"), 4 * MiB, "float32", (MiB,), TensorKind.ACTIVATION, OpId("o"))
    op = Op(OpId("o"), target, Phase.FORWARD, ("x",), ("y",), flops=flops,
            bytes_read=4 * MiB, bytes_written=4 * MiB)
    return Graph.build([op], [x, y], outputs=[TensorId("y")])


@pytest.mark.parametrize(("target", "flops", "cls"), [
    ("aten.native_batch_norm.default", 0, OpClass.BATCH_NORM),
    ("aten._native_batch_norm_legit.default", 0, OpClass.BATCH_NORM),
    ("aten.native_layer_norm.default", 0, OpClass.NORM),
    ("aten.native_group_norm.default", 0, OpClass.NORM),
    ("aten._scaled_dot_product_flash_attention_for_cpu.default", 10**9, OpClass.ATTENTION),
    ("aten._scaled_dot_product_efficient_attention_backward.default", 10**9,
     OpClass.ATTENTION),
    ("aten.native_batch_norm_backward.default", 0, OpClass.ELEMENTWISE),
])
def test_norm_and_attention_classes(target: str, flops: int, cls: OpClass) -> None:
    g = _one_op_graph(target, flops)
    assert op_class(g, g.ops[0]) is cls


def test_new_classes_keep_old_and_published_prices() -> None:
    """A profile without norm / attention figures (every published one, and files written
    before those classes) prices norms as elementwise and attention as a matmul."""
    bw = 3350e9 * 0.85
    for target in ("aten.native_batch_norm.default", "aten.native_layer_norm.default"):
        g = _one_op_graph(target)
        assert op_seconds(g, g.ops[0], H100) == pytest.approx(8 * MiB / bw + 5e-6)
    g = _one_op_graph("aten._scaled_dot_product_flash_attention.default", 10**12)
    assert op_seconds(g, g.ops[0], H100) == pytest.approx(1e12 / (67e12 * 0.7) + 5e-6)


def test_calibrated_norm_and_attention_figures_price_their_ops() -> None:
    p = DeviceProfile("cpu", "", {"float32": 1e11}, 1e11, 1e10, 0.0,
                      {"elementwise": 1.0, "norm": 0.5, "batch_norm": 0.2},
                      attention_flops_per_s={"float32": 2.5e10})
    g = _one_op_graph("aten.native_batch_norm.default")
    assert op_seconds(g, g.ops[0], p) == pytest.approx(8 * MiB / 2e9)
    g = _one_op_graph("aten.native_layer_norm.default")
    assert op_seconds(g, g.ops[0], p) == pytest.approx(8 * MiB / 5e9)
    g = _one_op_graph("aten._scaled_dot_product_flash_attention_for_cpu.default", 10**9)
    assert op_seconds(g, g.ops[0], p) == pytest.approx(1e9 / 2.5e10)
    assert profile_from_dict(profile_to_dict(p)) == p


def test_a_profile_file_without_the_new_fields_loads() -> None:
    d = profile_to_dict(DeviceProfile("cpu", "", {"float32": 1e11}, 1e11, 1e10, 1e-6,
                                      {"elementwise": 0.8}))
    del d["attention_flops_per_s"], d["conv_flops_per_s"]
    p = profile_from_dict(d)
    assert p.attention_flops_per_s == {}
    assert p.conv_flops_per_s == {}
    g = _one_op_graph("aten.native_batch_norm.default")
    assert op_seconds(g, g.ops[0], p) == pytest.approx(8 * MiB / 8e9 + 1e-6)


def test_a_transcendental_op_uses_its_functions_efficiency() -> None:
    p = DeviceProfile("cpu", "", {"float32": 1e11}, 1e11, 1e10, 0.0,
                      {"elementwise": 1.0, "transcendental": 0.1, "transcendental.silu": 0.4})
    for target, rate in (("aten.silu.default", 4e9), ("aten.silu_backward.default", 4e9),
                         ("aten.silu_.default", 4e9), ("aten.tanh.default", 1e9)):
        g = _one_op_graph(target)
        assert op_seconds(g, g.ops[0], p) == pytest.approx(8 * MiB / rate), target
