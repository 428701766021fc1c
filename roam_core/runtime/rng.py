"""Replay a step's RNG timeline (:mod:`roam_core.trace.rng`) with the real generators.

:class:`RngReplay` is driven by the interpreter: :meth:`~RngReplay.start` before the first op,
:meth:`~RngReplay.before` / :meth:`~RngReplay.after` around every op, and
:meth:`~RngReplay.finish` at the end.  For a random op whose virtual ``state_in`` is not the
state its device's stream is at (a rewind, e.g. ``torch.utils.checkpoint`` recomputing a
dropout), it sets the generator to the real state saved when the stream was at
``state_in``; after an op whose ``state_out`` is drawn at again later (or ends the step), it
saves the real state.  Any op order that keeps each op after the op that creates its
``state_in`` (the tracer's RNG control edges chain the random ops in program order) replays
eager's random numbers exactly.  A timeline without rewinds makes every call a no-op.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from roam_core.base.errors import ExecutorError
from roam_core.trace.rng import RngTimeline

__all__ = ["RngReplay"]


def _get(dev: torch.device) -> torch.Tensor:
    if dev.type == "cuda":
        return torch.cuda.get_rng_state(dev)
    return torch.get_rng_state()


def _set(dev: torch.device, state: torch.Tensor) -> None:
    if dev.type == "cuda":
        torch.cuda.set_rng_state(state, dev)
    else:
        torch.set_rng_state(state)


class RngReplay:
    """Real generator states for the virtual states of an :class:`RngTimeline`.

    Parameters
    ----------
    timeline : RngTimeline
        From :attr:`roam_core.trace.TracedStep.rng`.
    device : torch.device
        The device the step runs on (its generator serves the ``cuda`` draws).
    """

    def __init__(self, timeline: RngTimeline, device: torch.device) -> None:
        self.active = timeline.has_jumps
        self.device = torch.device(device)
        self.draws = timeline.by_op
        self.final = dict(timeline.final)
        needed: set[tuple[str, int]] = {(d.device, d.state_in) for d in timeline.draws}
        needed.update(self.final.items())
        self.needed = needed
        self.saved: dict[tuple[str, int], torch.Tensor] = {}
        self.cur: dict[str, int] = {}
        self.restores = 0

    def _dev(self, kind: str) -> torch.device:
        return torch.device("cpu") if kind == "cpu" else self.device

    def _devices(self) -> Iterable[str]:
        return {d.device for d in self.draws.values()} | set(self.final)

    def start(self) -> None:
        """Save every stream's starting state (state 0)."""
        if not self.active:
            return
        self.saved, self.restores = {}, 0
        for kind in self._devices():
            self.cur[kind] = 0
            self.saved[(kind, 0)] = _get(self._dev(kind))

    def _goto(self, kind: str, state: int, op: str) -> None:
        if self.cur.get(kind) == state:
            return
        real = self.saved.get((kind, state))
        if real is None:
            raise ExecutorError(
                f"op {op!r} draws random numbers from a {kind} generator state that no op "
                "before it created: the order breaks the step's RNG dependencies")
        _set(self._dev(kind), real)
        self.cur[kind] = state
        self.restores += 1

    def before(self, op: str) -> None:
        """Put ``op``'s generator where ``op`` draws (no-op for non-random ops)."""
        if not self.active:
            return
        d = self.draws.get(op)
        if d is not None:
            self._goto(d.device, d.state_in, op)

    def after(self, op: str) -> None:
        """Record the state ``op`` leaves its stream in (saved when drawn at later)."""
        if not self.active:
            return
        d = self.draws.get(op)
        if d is None:
            return
        self.cur[d.device] = d.state_out
        if (d.device, d.state_out) in self.needed and (d.device, d.state_out) not in self.saved:
            self.saved[(d.device, d.state_out)] = _get(self._dev(d.device))

    def finish(self) -> None:
        """Leave every stream where eager leaves it (the next step starts there)."""
        if not self.active:
            return
        for kind, state in self.final.items():
            self._goto(kind, state, "<end of step>")
        self.saved = {}
