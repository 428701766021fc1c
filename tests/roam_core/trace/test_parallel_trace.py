"""Tracing one rank of FSDP2 / DDP under the fake process group (``docs/parallel.md``)."""

from __future__ import annotations

import itertools
import math

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from torch import nn  # noqa: E402

from roam_core.base.errors import ConfigError, TraceError  # noqa: E402
from roam_core.model.graph import EdgeReason, Phase, TensorKind  # noqa: E402
from roam_core.model.parallel import ParallelSetting, is_collective, parallel_of  # noqa: E402
from roam_core.oracle.validate import check_plan  # noqa: E402
from roam_core.trace import trace_fx, trace_training_step  # noqa: E402
from roam_core.trace.parallel import RankLayout, rank_process_group  # noqa: E402

W = 4


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x))


class _Net(nn.Module):
    """An input layer, three blocks in a ModuleList, a head tied to nothing; 10 classes."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(8, 16)
        self.blocks = nn.ModuleList(_Block() for _ in range(3))
        self.head = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        for b in self.blocks:
            x = b(x)
        return self.head(x).sum()


def _ops(graph, name: str) -> list:  # type: ignore[no-untyped-def]
    return [op for op in graph.ops if name in op.target]


@pytest.fixture(scope="module")
def fsdp():  # type: ignore[no-untyped-def]
    return trace_fx(_Net(), [torch.empty(4, 8)], None, "adamw", parallel="fsdp", world_size=W)


@pytest.mark.slow
def test_fsdp_shards_and_kinds(fsdp) -> None:  # type: ignore[no-untyped-def]
    g = fsdp.graph
    assert not dist.is_initialized()  # the fake group lives only while tracing
    assert parallel_of(g) == ParallelSetting("fsdp", W)
    shapes = {t.name: t.shape for t in g.tensors.values() if t.kind is TensorKind.PARAMETER}
    assert shapes["inp.weight"] == (4, 8)
    assert shapes["head.weight"] == (3, 16)
    assert shapes["head.bias"] == (3,)  # 10 rows over 4 ranks: 3 each, padded
    net = _Net()
    full = sum(p.numel() for p in net.parameters()) * 4
    per_rank = sum(t.size_bytes for t in g.tensors.values() if t.kind is TensorKind.PARAMETER)
    padded = RankLayout.build(net, ParallelSetting("fsdp", W)).bytes_per_rank()
    assert per_rank == padded
    assert full / W <= per_rank <= full / W * 1.1
    grads = sum(t.size_bytes for t in g.tensors.values() if t.kind is TensorKind.GRADIENT)
    assert grads == per_rank  # the reduce-scatter outputs hold the sharded gradients
    comm = [t for t in g.tensors.values() if t.kind is TensorKind.COMMUNICATION]
    assert comm
    assert max(t.size_bytes for t in comm) >= 16 * 16 * 4


@pytest.mark.slow
def test_fsdp_collectives_and_their_order(fsdp) -> None:  # type: ignore[no-untyped-def]
    g = fsdp.graph
    ag, rs = _ops(g, "all_gather_into_tensor"), _ops(g, "reduce_scatter_tensor")
    # forward: root + 3 blocks; backward: the blocks again (reshard after forward), not root
    assert [op.phase for op in ag].count(Phase.FORWARD) == 4
    assert [op.phase for op in ag].count(Phase.BACKWARD) == 3
    assert len(rs) == 4
    assert all(op.phase is Phase.BACKWARD for op in rs)
    coll = [op.id for op in g.ops if is_collective(op.target)]
    chain = [(e.src, e.dst) for e in g.control_edges if e.reason is EdgeReason.COLLECTIVE]
    assert chain == list(itertools.pairwise(coll))
    assert all(op.recomputable is False for op in g.ops if "c10d" in op.target)
    # backward prefetch: the block before is gathered before this block's reduce-scatter
    back = [op.id for op in g.ops if op.phase is Phase.BACKWARD and is_collective(op.target)]
    assert ["all_gather" in x for x in back[:3]] == [True, True, False]


@pytest.mark.slow
def test_planned_rank_is_valid_and_keeps_the_collective_order(fsdp) -> None:  # type: ignore[no-untyped-def]
    from roam_core.planner import make_plan
    from roam_core.planner.config import PlannerConfig

    g = fsdp.graph
    plan = make_plan(g, PlannerConfig(workers=1, time_limit_s=2))
    assert check_plan(g, plan) == []
    assert plan.planned_peak_bytes <= plan.baseline_peak_bytes
    coll = [op for op in plan.order if is_collective(g.op(op).target)]
    assert coll == [op.id for op in g.ops if is_collective(op.target)]


@pytest.mark.slow
def test_padded_shards_are_fsdp2s() -> None:
    """The layout's padded shard of every parameter is what ``fully_shard`` holds."""
    from torch.distributed.fsdp import fully_shard

    net = _Net()
    layout = RankLayout.build(net, ParallelSetting("fsdp", W))
    with rank_process_group(W):
        for b in net.blocks:
            fully_shard(b)
        fully_shard(net)
        for name, p in net.named_parameters():
            local = p.to_local()
            assert layout.params[name].rows_of(0) == (0, local.shape[0])
            assert tuple(local.shape[1:]) == layout.local_shape(name)[1:]
        groups = [s._fsdp_param_group for s in
                  (m._get_fsdp_state() for m in (net, *net.blocks))]
        padded = [tuple(fp.padded_sharded_param_size) for g in groups for fp in g.fsdp_params]
    assert sorted(padded) == sorted(layout.local_shape(n) for n in layout.params)


@pytest.mark.slow
def test_ddp_buckets_and_no_reshard() -> None:
    g = trace_training_step(_Net(), [torch.empty(4, 8)], None, "adamw", parallel="ddp",
                            world_size=W)
    assert len(_ops(g, "all_reduce")) == 1  # 1 KiB of gradients: one bucket
    params = [t for t in g.tensors.values() if t.kind is TensorKind.PARAMETER]
    assert {t.name: t.shape for t in params}["inp.weight"] == (16, 8)  # replicas
    comm = sum(t.size_bytes for t in g.tensors.values() if t.kind is TensorKind.COMMUNICATION)
    assert comm == sum(t.size_bytes for t in params)
    g2 = trace_training_step(_Net(), [torch.empty(4, 8)], None, "adamw", parallel="fsdp",
                             world_size=W, reshard_after_forward=False)
    assert all(op.phase is Phase.FORWARD for op in _ops(g2, "all_gather_into_tensor"))


@pytest.mark.slow
def test_bf16_mixed_gathers_in_bfloat16_and_keeps_fp32_shards() -> None:
    g = trace_training_step(_Net(), [torch.empty(4, 8)], None, "adamw", parallel="fsdp",
                            world_size=W, precision="bf16-mixed")
    gathered = {g.tensors[op.outputs[0]].dtype for op in _ops(g, "all_gather_into_tensor")}
    assert gathered == {"bfloat16"}
    kinds = {t.dtype for t in g.tensors.values()
             if t.kind in (TensorKind.PARAMETER, TensorKind.GRADIENT)}
    assert kinds == {"float32"}
    assert g.origin["precision"] == "bf16-mixed"


def test_bad_settings_are_clear_errors() -> None:
    net, x = _Net(), [torch.empty(4, 8)]
    # one device traces every precision (autocast); a rank only those it runs
    assert trace_training_step(net, x, None, "adamw",
                               precision="bf16-mixed").origin["precision"] == "bf16-mixed"
    for prec in ("bf16", "fp16-mixed"):
        with pytest.raises(ConfigError, match=f"precision '{prec}' with --parallel fsdp"):
            trace_training_step(net, x, None, "adamw", parallel="fsdp", world_size=2,
                                precision=prec)
    with pytest.raises(ConfigError, match="clipping and accumulation"):
        trace_training_step(net, x, None, "adamw", parallel="fsdp", world_size=2,
                            max_grad_norm=1.0)
    with pytest.raises(ConfigError, match="world size 4 needs parallel fsdp"):
        trace_training_step(net, x, None, "adamw", world_size=4)
    with pytest.raises(ConfigError, match="with --parallel ddp"):
        trace_training_step(net, x, None, "adamw", parallel="ddp", world_size=2,
                            precision="bf16-mixed")
    assert not dist.is_initialized()


def test_a_failing_trace_leaves_no_process_group() -> None:
    class Bad(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("boom")

    with pytest.raises(TraceError, match="boom"):
        trace_training_step(Bad(), [torch.empty(2, 4)], None, "sgd", parallel="fsdp",
                            world_size=2)
    assert not dist.is_initialized()


def test_an_existing_group_of_another_size_is_refused() -> None:
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        with pytest.raises(TraceError, match="world size 2 exists"), rank_process_group(8):
            pass
        with rank_process_group(2) as name:  # the caller's group is used, and kept
            assert name == dist.group.WORLD.group_name
        assert dist.is_initialized()
    finally:
        dist.destroy_process_group()


def test_layout_policies() -> None:
    net = _Net()
    paths = {w: [u.path for u in RankLayout.build(net, ParallelSetting("fsdp", 2, wrap=w))
                 .units] for w in ("blocks", "leaves", "root")}
    assert paths["blocks"] == ["", "blocks.0", "blocks.1", "blocks.2"]
    assert paths["leaves"] == ["", "inp", "blocks.0.fc", "blocks.1.fc", "blocks.2.fc", "head"]
    assert paths["root"] == [""]
    ddp = RankLayout.build(net, ParallelSetting("ddp", 2, first_bucket_bytes=100,
                                                bucket_bytes=2000))
    first = ddp.units[0].params
    assert first[0] == "head.bias"
    assert sum(
        math.prod(ddp.params[n].full_shape) * 4 for n in first) >= 100
    assert sorted(n for u in ddp.units for n in u.params) == sorted(ddp.params)
