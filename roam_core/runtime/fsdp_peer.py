"""The peer's per-rank peak: torch's ``FSDPMemTracker`` on the fake process group.

``torch.distributed._tools.fsdp2_mem_tracker.FSDPMemTracker`` is torch's own memory estimate
of an FSDP2 rank (torchtitan's estimator runs it the same way): the zoo model is built on the
meta device, ``fully_shard`` on the units of the layout and the root (fake process group of
the world size), materialised as fake tensors (``to_empty`` under ``FakeTensorMode``: no real
memory; the same totals as with real tensors, measured once on gpt2), and two training steps
run inside the tracker.  The step is written as roam traces it, ``loss_fn(model(*inputs))``,
so that no Python name keeps the model output alive through the backward.  The peak is the
tracker's largest total over both steps (the second one starts with the optimizer state, as
roam's steady trace does).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from roam_core.model.parallel import ParallelSetting
from roam_core.runtime.rank_training import torch_parallel_model
from roam_core.trace.parallel import rank_process_group
from roam_core.zoo.steps import build_zoo_step

__all__ = ["PeerPeak", "fsdp_mem_tracker_peak"]


@dataclass(frozen=True)
class PeerPeak:
    """What ``FSDPMemTracker`` measured.

    Parameters
    ----------
    peak_bytes : int
        Largest total bytes of the rank's device.
    bytes_by_category : dict of str to int
        The tracker's categories at that peak (sharded / unsharded parameters, gradients,
        activations, temporaries, all-gather and reduce-scatter buffers, optimizer state...).
    """

    peak_bytes: int
    bytes_by_category: dict[str, int] = field(default_factory=dict)


def fsdp_mem_tracker_peak(model: str, batch_size: int, seq_len: int | None,
                          parallel: ParallelSetting, precision: str = "fp32",
                          steps: int = 2) -> PeerPeak:
    """Per-rank peak of eager FSDP2 on zoo ``model``, as ``FSDPMemTracker`` measures it."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

    with rank_process_group(parallel.world_size):
        zs = build_zoo_step(model, batch_size, seq_len, "steady", None, "meta")
        m = torch_parallel_model(zs.model, parallel, precision)
        with FakeTensorMode(allow_non_fake_inputs=True):
            m.to_empty(device="cpu")
            inputs = [torch.zeros(x.shape, dtype=x.dtype) for x in zs.example_inputs]
            opt = zs.optimizer_factory(list(m.parameters()))
            tracker = FSDPMemTracker(m, opt)
            tracker.track_inputs(tuple(inputs))
            with tracker:
                for i in range(steps):
                    # no Python name holds the output: it is freed as eager frees it
                    loss = (m(*inputs) if zs.loss_fn is None else zs.loss_fn(m(*inputs)))
                    loss.backward()
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                    del loss
                    if i + 1 < steps:  # the tracker refuses a second step otherwise
                        tracker.reset_mod_stats()
            snap = tracker.get_tracker_snapshot("peak")
    dev = next(iter(snap))
    cats = {str(getattr(k, "value", k)): int(v) for k, v in snap[dev].items()}
    return PeerPeak(cats.pop("Total"), cats)
