"""The parallel setting a graph records, and which op targets are collectives."""

from __future__ import annotations

import pytest

from roam_core.base.errors import ConfigError
from roam_core.model.graph import Graph, Op, OpId, Phase, Tensor, TensorKind
from roam_core.model.parallel import ParallelSetting, is_collective, is_wait, parallel_of


def test_round_trip_and_defaults() -> None:
    s = ParallelSetting("fsdp", 8, reshard_after_forward=False, wrap="leaves")
    assert ParallelSetting.from_mapping(s.to_dict()) == s
    assert ParallelSetting.from_mapping(None) == ParallelSetting()
    assert not ParallelSetting().active
    assert s.active
    assert "no reshard" in s.describe()
    assert "leaves" in s.describe()
    assert ParallelSetting("ddp", 2).describe().startswith("ddp, world size 2")


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"kind": "tp", "world_size": 2}, "parallel must be one of"),
    ({"kind": "fsdp", "world_size": 0}, "world size"),
    ({"kind": "none", "world_size": 4}, "needs parallel fsdp"),
    ({"kind": "fsdp", "world_size": 2, "wrap": "layers"}, "wrap policy"),
])
def test_bad_settings_name_the_option(kwargs: dict, match: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ConfigError, match=match):
        ParallelSetting(**kwargs)


def test_parallel_of_reads_the_origin() -> None:
    t = Tensor("x", 4, "f", (1,), TensorKind.TEMPORARY, OpId("a"))
    g = Graph.build([Op(OpId("a"), "aten.ones.default", Phase.FORWARD, (), ("x",))], [t],
                    origin={"parallel": ParallelSetting("ddp", 4).to_dict()})
    assert parallel_of(g) == ParallelSetting("ddp", 4)
    assert parallel_of(Graph.build([], [])) == ParallelSetting()


def test_collective_targets() -> None:
    for t in ("_c10d_functional.all_gather_into_tensor.default",
              "_c10d_functional.reduce_scatter_tensor.default",
              "_c10d_functional.all_reduce.default", "c10d.allreduce_.default"):
        assert is_collective(t)
    assert not is_collective("_c10d_functional.wait_tensor.default")
    assert is_wait("_c10d_functional.wait_tensor.default")
    assert not is_collective("aten.mm.default")
    assert not is_wait("aten.mm.default")
