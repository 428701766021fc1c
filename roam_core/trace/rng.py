"""The RNG timeline of a traced step: which generator state every random op draws from.

Eager PyTorch draws random numbers from one stream per device: each random op (dropout's
``bernoulli_``, ``native_dropout``, ...) starts from the state the previous one left.  Code
can also *rewind* the stream: ``torch.utils.checkpoint`` saves the RNG state in the forward
(``torch.get_rng_state()``), sets it again before recomputing the checkpointed region in the
backward (``torch.set_rng_state``), so the recomputed dropout masks equal the forward's, and
restores the state it found afterwards (``torch.random.fork_rng``).  A graph that only
records "these ops are random, in this order" replays the recomputation with fresh masks.

:func:`record_rng` intercepts the state get/set calls (CPU and CUDA) while the step is traced
and :func:`rng_timeline` turns them into an :class:`RngTimeline`: for every random op, the
*virtual generator state* it draws at (``state_in``) and the one it leaves (``state_out``).
States are nodes of a tree: the step starts at state ``0`` of each device; drawing op ``o``
at state ``s`` leads to the child ``(s, signature(o))``, so two identical draws from one
state lead to one state, as they do in PyTorch.

The notion the rest of roam uses is **"op B reproduces the RNG draw of op A"**
(:meth:`RngTimeline.reproduces`): B draws at the same state as A with the same signature
(target, shapes, dtypes, scalar arguments), hence produces bit-identical random numbers.
A recomputation pass that clones a random op A into B records that with
:meth:`RngTimeline.with_replay` (``B`` draws at ``A``'s state, and the stream continues
where it was).  The runtime (:mod:`roam_core.runtime.rng`) replays any timeline: before each
random op whose ``state_in`` is not the state the stream is at, it sets the generator to the
saved real state; it saves the real state after each op whose ``state_out`` is needed later.
A timeline without rewinds (``has_jumps`` false) costs nothing at run time.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from roam_core.base.errors import TraceError

__all__ = ["RngDraw", "RngRecorder", "RngTimeline", "record_rng", "rng_timeline"]

#: Virtual generator state: ``(device type, state number)``; ``(dev, 0)`` starts the step.
State = tuple[str, int]


@dataclass(frozen=True, slots=True)
class RngDraw:
    """One random op's draw.

    Parameters
    ----------
    op : str
        The op id (FX node name).
    device : str
        Device type whose generator it draws from (``"cpu"``, ``"cuda"``).
    state_in, state_out : int
        Virtual states before and after the draw (per device).
    signature : str
        Target, tensor shapes/dtypes and scalar arguments: equal signatures from one state
        draw equal numbers.
    """

    op: str
    device: str
    state_in: int
    state_out: int
    signature: str


@dataclass(frozen=True)
class RngTimeline:
    """Every random op's draw, in program order, and where each device's stream ends.

    Parameters
    ----------
    draws : tuple of RngDraw
        Program order (the order of the RNG control edges).
    final : Mapping of str to int
        The state each device's stream is at when the step ends (eager leaves it there; the
        next step starts from it).
    """

    draws: tuple[RngDraw, ...] = ()
    final: Mapping[str, int] = field(default_factory=dict)

    @property
    def by_op(self) -> dict[str, RngDraw]:
        """Op id -> its draw."""
        return {d.op: d for d in self.draws}

    @property
    def has_jumps(self) -> bool:
        """Whether some op draws at another state than the one its predecessor left (a
        rewind), or the stream ends elsewhere: only then does replay need to act."""
        cur: dict[str, int] = {}
        for d in self.draws:
            if d.state_in != cur.get(d.device, 0):
                return True
            cur[d.device] = d.state_out
        return any(cur.get(dev, 0) != s for dev, s in self.final.items())

    def reproduces(self, op: str) -> str | None:
        """The earlier op whose draw ``op`` repeats exactly (same state, same signature).

        Examples
        --------
        >>> t = RngTimeline((RngDraw("a", "cpu", 0, 1, "x"), RngDraw("b", "cpu", 0, 1, "x")))
        >>> t.reproduces("b"), t.reproduces("a")
        ('a', None)
        """
        mine = self.by_op.get(op)
        if mine is None:
            return None
        for d in self.draws:
            if d.op == op:
                return None
            if (d.device, d.state_in, d.signature) == (mine.device, mine.state_in,
                                                       mine.signature):
                return d.op
        return None

    def with_replay(self, op: str, of: str) -> RngTimeline:
        """Add the new op ``op``, a clone of the random op ``of`` (a recomputation), drawing
        at ``of``'s state: it reproduces ``of``'s draw, and the runtime puts the stream
        back where it was before the next op that continues it.

        Raises
        ------
        TraceError
            ``of`` is not a random op of the timeline, or ``op`` already is.
        """
        src = self.by_op.get(of)
        if src is None:
            raise TraceError(f"op {of!r} draws no random numbers: nothing to reproduce")
        if op in self.by_op:
            raise TraceError(f"op {op!r} already has an RNG draw")
        return replace(self, draws=(*self.draws, replace(src, op=op)))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"draws": [[d.op, d.device, d.state_in, d.state_out, d.signature]
                          for d in self.draws], "final": dict(self.final)}


class RngRecorder:
    """Records RNG state get/set calls against the FX graph being traced (see the module)."""

    def __init__(self) -> None:
        #: (node count when called, "get"/"set", device, token id)
        self.events: list[tuple[int, str, str, int]] = []
        self._tokens: list[torch.Tensor] = []  # keep tokens alive: ids stay unique

    def _count(self) -> int:
        from torch.fx.experimental.proxy_tensor import get_proxy_mode

        mode = get_proxy_mode()
        return len(mode.tracer.graph.nodes) if mode is not None else 0

    def got(self, device: str, state: torch.Tensor) -> torch.Tensor:
        self._tokens.append(state)
        self.events.append((self._count(), "get", device, id(state)))
        return state

    def set(self, device: str, state: torch.Tensor) -> None:
        self.events.append((self._count(), "set", device, id(state)))


def _wrap_get(rec: RngRecorder, dev: str, fn: Any) -> Any:
    def get_rng_state(*args: Any, **kwargs: Any) -> torch.Tensor:
        return rec.got(dev, fn(*args, **kwargs))
    return get_rng_state


def _wrap_set(rec: RngRecorder, dev: str, fn: Any) -> Any:
    def set_rng_state(new_state: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        rec.set(dev, new_state)
        fn(new_state, *args, **kwargs)
    return set_rng_state


@contextlib.contextmanager
def record_rng() -> Iterator[RngRecorder]:
    """Intercept ``torch.get_rng_state``/``set_rng_state`` (and ``torch.cuda``'s) while
    tracing.  The real functions still run (the caller's generators behave as usual)."""
    rec = RngRecorder()
    patched: list[tuple[Any, str, Any]] = []
    targets = [(torch, "cpu")]
    if hasattr(torch, "cuda") and hasattr(torch.cuda, "get_rng_state"):
        targets.append((torch.cuda, "cuda"))
    for mod, dev in targets:
        for name, wrap in (("get_rng_state", _wrap_get), ("set_rng_state", _wrap_set)):
            fn = getattr(mod, name, None)
            if fn is not None:
                patched.append((mod, name, fn))
                setattr(mod, name, wrap(rec, dev, fn))
    try:
        yield rec
    finally:
        for mod, name, fn in reversed(patched):
            setattr(mod, name, fn)


def _signature(node: Any) -> str:
    def desc(a: Any) -> str:
        if isinstance(a, torch.fx.Node):
            v = a.meta.get("val")
            if isinstance(v, torch.Tensor):
                return f"T{tuple(v.shape)}{v.dtype}"
            return "N"
        if isinstance(a, (list, tuple)):
            return "[" + ",".join(desc(x) for x in a) + "]"
        return repr(a)
    args = ",".join(desc(a) for a in node.args)
    kwargs = ",".join(f"{k}={desc(v)}" for k, v in sorted(node.kwargs.items()))
    return f"{node.target}({args};{kwargs})"


def _device_of(node: Any) -> str:
    from torch.utils._pytree import tree_leaves

    for v in tree_leaves(node.meta.get("val")):
        if isinstance(v, torch.Tensor):
            return v.device.type
    return "cpu"


def rng_timeline(gm: Any, rec: RngRecorder, is_random: Any) -> RngTimeline:
    """Build the timeline of ``gm`` (nodes in program order) from the recorded calls.

    Parameters
    ----------
    gm : torch.fx.GraphModule
        The traced step, before any node is removed.
    rec : RngRecorder
        What :func:`record_rng` saw while tracing it.
    is_random : callable
        ``node -> bool``: the random-op predicate of the graph builder.

    Raises
    ------
    TraceError
        The step sets an RNG state it did not get inside the step (``torch.manual_seed``-like
        reseeding of a saved outside state cannot be replayed).
    """
    events = sorted(enumerate(rec.events), key=lambda e: (e[1][0], e[0]))
    token_state: dict[int, State] = {}
    cur: dict[str, int] = {}
    child: dict[tuple[str, int, str], int] = {}
    counter: dict[str, int] = {}
    draws: list[RngDraw] = []
    ev = 0
    for i, node in enumerate(gm.graph.nodes):
        while ev < len(events) and events[ev][1][0] <= i:
            _, kind, dev, tok = events[ev][1]
            if kind == "get":
                token_state[tok] = (dev, cur.get(dev, 0))
            else:
                if tok not in token_state:
                    raise TraceError(
                        f"the step sets the {dev} RNG state to one it did not save inside the "
                        "step (torch.set_rng_state with an outside state): such a step cannot "
                        "be replayed; save the state inside the step or seed outside it")
                cur[dev] = token_state[tok][1]
            ev += 1
        if node.op != "call_function" or not is_random(node):
            continue
        dev = _device_of(node)
        s_in = cur.get(dev, 0)
        sig = _signature(node)
        key = (dev, s_in, sig)
        if key not in child:
            counter[dev] = counter.get(dev, 0) + 1
            child[key] = counter[dev]
        draws.append(RngDraw(node.name, dev, s_in, child[key], sig))
        cur[dev] = child[key]
    for _, (_, kind, dev, tok) in events[ev:]:  # calls after the last node
        if kind == "get":
            token_state[tok] = (dev, cur.get(dev, 0))
        elif tok in token_state:
            cur[dev] = token_state[tok][1]
    return RngTimeline(tuple(draws), dict(cur))
