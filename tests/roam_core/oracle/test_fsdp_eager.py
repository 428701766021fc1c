"""Eager FSDP2's holds: the root's gathered parameters live until its reduce-scatter, which
closes the gap to ``FSDPMemTracker`` (the embedding table FSDP2 keeps through the backward)."""

from __future__ import annotations

import pytest

from roam_core.oracle.baseline import eager_report
from roam_core.oracle.fsdp_eager import fsdp2_eager_peak_bytes, fsdp2_held_storages
from tests.builders import two_param_step

torch = pytest.importorskip("torch")

from roam_core.model.parallel import ParallelSetting  # noqa: E402
from roam_core.zoo.steps import trace_zoo  # noqa: E402


def test_one_device_is_the_program_order_peak() -> None:
    g = two_param_step(act_bytes=1 << 20)
    assert fsdp2_held_storages(g) == {}
    assert fsdp2_eager_peak_bytes(g) == eager_report(g, 1).simulated_peak_bytes


@pytest.mark.slow
@pytest.mark.parametrize("reshard", [True, False])
def test_the_root_keeps_its_gathered_embedding(reshard: bool) -> None:
    par = ParallelSetting("fsdp", 2, reshard_after_forward=reshard)
    g = trace_zoo("tiny_llama", 8, 128, "steady", parallel=par).graph
    held = fsdp2_held_storages(g)
    sizes = sorted(g.tensors[t].size_bytes for t in held)
    # the root's embedding and LM head, 256 x 64 fp32 each (and the final norm)
    assert sizes.count(256 * 64 * 4) == 2
    if not reshard:  # every unit holds its buffers until its reduce-scatter
        assert len(held) > 3
    eager = eager_report(g, 1).simulated_peak_bytes
    assert eager < fsdp2_eager_peak_bytes(g) <= eager + sum(sizes)


@pytest.mark.slow
def test_with_the_holds_the_peak_meets_fsdp_mem_tracker() -> None:
    from roam_core.runtime.fsdp_peer import fsdp_mem_tracker_peak

    par = ParallelSetting("fsdp", 2)
    g = trace_zoo("tiny_llama", 8, 128, "steady", parallel=par).graph
    peer = fsdp_mem_tracker_peak("tiny_llama", 8, 128, par).peak_bytes
    assert abs(fsdp2_eager_peak_bytes(g) / peer - 1) < 0.005
