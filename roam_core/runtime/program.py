"""A traced step compiled into a prepared program over one arena: checked once, then lean.

:class:`Program` turns an :class:`~roam_core.runtime.arena_runner.ArenaRunner`'s FX graph and a plan
order into a list of **instructions**, one per node in the order they run (ops of the order;
folded ``getitem`` nodes just before their first reader).  Each instruction knows, before
anything runs, how its node writes its new storages:

* ``out``: through the op's ``out=`` overload into its slot views (created once);
* ``factory``: ``fill_`` / ``arange(out=)`` / nothing (``empty``) on its slot;
* ``fallback``: run functionally, copy the new storages into their slots;
* ``view``: a pure view of values whose address never changes (``view``, ``t``,
  ``getitem``...): computed once, its result reused by every later step;
* ``call``: anything else (in-place ops, views of values that change): run every step.

Two ways to run it:

1. :meth:`Program.run_checked` (the first step, or every step in verify mode): every
   instruction runs with the op named in any error, the ``was resized`` warning promoted to
   an error, and the address check after each op
   (:meth:`~roam_core.runtime.arena_runner.ArenaRunner.check_outputs`).  Placement (bounds,
   alignment, no overlap with a live storage) is checked once when the program is built.
2. :meth:`Program.run_fast` (every later step): a flat list of bound callables
   (``functools.partial(kernel, *args, out=slot)``) is called in turn; views are not
   recomputed, nothing is looked up or checked.  Values whose objects change from step to
   step (results of ``call`` ops that are not in-place, off-arena temporaries) live in a
   small register file that the later instructions read.

Per-step scalars: instructions whose node has entries in ``scalar_slots`` read those
numeric arguments from :attr:`Program.scalars` (refreshed by the caller before each step,
e.g. an optimizer's bias corrections by :class:`~roam_core.runtime.scalars.OptimizerScalars`).

A grad scaler's step (``runner.amp``, :class:`~roam_core.trace.precision.AmpGuard`): before
the first of the optimizer's update ops runs, the scaler's ``found_inf`` flag is read (one
device sync, as ``GradScaler.step`` does); when it is set, every update op of this step is
skipped and :attr:`Program.skipped` says so.  A checked run that skipped them does not count
as the checked run the fast path is bound from (the skipped ops' values were not made).
"""

from __future__ import annotations

import functools
import heapq
import logging
import operator
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._pytree import tree_leaves

from roam_core.base.errors import ExecutorError
from roam_core.model.graph import Graph, OpId, TensorId
from roam_core.model.parallel import is_collective
from roam_core.oracle.simulate import lifetimes

if TYPE_CHECKING:  # the runner builds programs: a run-time import would be a cycle
    from roam_core.runtime.arena_runner import ArenaRunner
    from roam_core.runtime.rng import RngReplay

__all__ = ["ARANGE", "EMPTY", "FILL_ARG", "FILL_CONST", "LiveSet", "Program", "flat_leaves",
           "flat_outputs", "replace_leaves", "storage_key"]

_logger = logging.getLogger(__name__)

#: The size, stride and storage offset a tensor had first (``as_strided_`` puts them back).
_ViewMeta: TypeAlias = "tuple[torch.Size, tuple[int, ...], int | torch.SymInt]"
_aten = torch.ops.aten


def _wait_tensor(x: Any) -> Any:
    """``x`` (a collective's result: a tensor or a list of them) once its data arrived."""
    wait = torch.ops._c10d_functional.wait_tensor
    if isinstance(x, torch.Tensor):
        return wait(x)
    return type(x)(wait(t) if isinstance(t, torch.Tensor) else t for t in x)
_INPLACE_VIEW = getattr(torch.Tag, "inplace_view", None)

# Factory ops: the value written into the slot (None: leave the bytes as they are).
FILL_CONST = {
    _aten.ones_like.default: 1, _aten.zeros_like.default: 0,
    _aten.ones.default: 1, _aten.zeros.default: 0,
    _aten.new_ones.default: 1, _aten.new_zeros.default: 0,
}
FILL_ARG = {  # position of the fill value among the positional args
    _aten.full.default: 1, _aten.full_like.default: 1, _aten.new_full.default: 2,
    _aten.scalar_tensor.default: 0,
}
EMPTY = frozenset({
    _aten.empty.memory_format, _aten.empty_like.default, _aten.new_empty.default,
    _aten.empty_strided.default, _aten.new_empty_strided.default,
})
ARANGE = frozenset({_aten.arange.default, _aten.arange.start, _aten.arange.start_step})


@dataclass(frozen=True, slots=True)
class _Reg:
    """An argument read from the register file (a value whose object changes per step)."""

    name: str


@dataclass(frozen=True, slots=True)
class _Scalar:
    """An argument read from :attr:`Program.scalars`."""

    index: int


@dataclass
class _Instr:
    node: torch.fx.Node
    kind: str  # out | factory | empty | arange | fallback | view | call
    fn: Any
    args: Any  # FX structure: Nodes / _Scalar inside
    kwargs: dict[str, Any]
    bufs: dict[int, torch.Tensor] = field(default_factory=dict)  # id(fake) -> slot view
    fakes: list[Any] = field(default_factory=list)
    result: Any = None  # the static result object (out / factory / empty)
    static: bool = False  # the result object is the same every step
    fill: Any = None
    copy_bytes: int = 0
    inplace_view: bool = False  # an op that changes its input's shape in place
    collective: bool = False  # a collective: its result is waited for before it is copied


def _is_mutating(target: Any) -> bool:
    return isinstance(target, torch._ops.OpOverload) and any(
        a.alias_info is not None and a.alias_info.is_write for a in target._schema.arguments)


def _is_random(target: Any) -> bool:
    return isinstance(target, torch._ops.OpOverload) and (
        torch.Tag.nondeterministic_seeded in target.tags)


def _kernel(fn: Any) -> Any:
    """The C++ callable behind an OpOverload (one Python frame less per call), if exposed."""
    return getattr(fn, "_op", fn) if isinstance(fn, torch._ops.OpOverload) else fn


class Program:
    """The instructions of one plan order over an :class:`ArenaRunner` (see module notes).

    Parameters
    ----------
    runner : ArenaRunner
        Owns the arena, the slots and the FX graph.
    order : sequence of str
        The plan's op order (every graph op once, a valid order).
    scalar_slots : Mapping, optional
        ``node name -> [(flat argument index, scalar index)]``: numeric arguments of those
        nodes are read from ``scalars[scalar index]`` instead of the traced constant
        (flat index as numbered by :func:`flat_leaves` of ``(node.args, node.kwargs)``).
    check_live : bool
        Check at build time that no storage is placed over one still live.

    Raises
    ------
    ExecutorError
        An op missing from the order or named twice, a value read before it is made, a slot
        outside the arena, misaligned, or overlapping a live storage.
    """

    def __init__(self, runner: ArenaRunner, order: Sequence[OpId],
                 scalar_slots: Mapping[str, Sequence[tuple[int, int]]] | None = None, *,
                 check_live: bool = True) -> None:
        self.runner = runner
        self.order = tuple(order)
        self.scalar_slots = {k: list(v) for k, v in (scalar_slots or {}).items()}
        n_scalars = 1 + max((j for v in self.scalar_slots.values() for _, j in v), default=-1)
        #: per-step scalar values (``_Scalar`` arguments); the caller refreshes them
        self.scalars: list[Any] = [None] * n_scalars
        self.instrs: list[_Instr] = []
        self.static: set[str] = set()  # node names whose value object never changes
        self.counts = {"out": 0, "factory": 0, "fallback": 0}
        self.fallback_targets: dict[str, None] = {}
        self._fast: list[Callable[[], Any]] | None = None
        self.checked_runs = 0
        self.extra_peak = self.extra_total = 0
        self.checked_values = 0
        #: instruction index -> metadata its result object is reset to each step, because an
        #: in-place view op (``unsqueeze_``) later changes that object's shape
        self.restore: dict[int, _ViewMeta] = {}
        amp = getattr(runner, "amp", None)
        self._skippable: frozenset[str] = amp.step_ops if amp is not None else frozenset()
        self._found_inf = amp.found_inf if amp is not None else ""
        #: whether the last run skipped the update ops (a grad scaler found inf/NaN)
        self.skipped = False
        self._build(check_live)

    # ------------------------------------------------------------------ build
    def _build(self, check_live: bool) -> None:
        r = self.runner
        in_order = set(self.order)
        if len(in_order) != len(self.order):
            dup = next(n for n in self.order if self.order.count(n) > 1)
            raise ExecutorError(f"plan order names op {dup!r} twice")
        done: set[str] = set()
        for n in r.gm.graph.nodes:
            if n.op in ("placeholder", "get_attr"):
                done.add(n.name)
                self.static.add(n.name)
        live = LiveSet(r.graph, self.order, r.slot) if check_live else None

        def need(node: torch.fx.Node) -> None:
            for a in node.all_input_nodes:
                if a.name in done:
                    continue
                if a.name in in_order:
                    raise ExecutorError(f"a value of op {a.name!r} is read by {node.name!r} "
                                        "before it runs: the order is invalid")
                need(a)
                self._add(a, None)
                done.add(a.name)

        for step, name in enumerate(self.order):
            node = r.nodes.get(name)
            if node is None:
                raise ExecutorError(f"plan order names op {name!r}, which the step does not have")
            if live is not None:
                live.advance(step)
            need(node)
            self._add(node, live)
            done.add(name)
        self.output = next(n for n in r.gm.graph.nodes if n.op == "output")
        need(self.output)
        for n in r.gm.graph.nodes:
            if n.op == "call_function" and n.name not in done and (
                    _is_mutating(n.target) or n.name in r.graph.tensors):
                raise ExecutorError(f"op {n.name!r} ({n.target}) never ran: it is missing "
                                    "from the plan's order")

    def _args_of(self, node: torch.fx.Node) -> tuple[Any, dict[str, Any]]:
        slots = self.scalar_slots.get(node.name)
        if not slots:
            return node.args, dict(node.kwargs)
        new = {k: _Scalar(j) for k, j in slots}
        args, kwargs = replace_leaves((node.args, dict(node.kwargs)), new)
        return args, kwargs

    def _add(self, node: torch.fx.Node, live: Any) -> None:
        r = self.runner
        val = node.meta.get("val")
        fakes = [f for f in tree_leaves(val) if isinstance(f, torch.Tensor)]
        new = r.new_storages(node, fakes)
        for f, tid, off in new:
            r.check_slot(node.name, tid, f, off)
            if live is not None:
                live.place(node.name, tid, off, f.untyped_storage().nbytes())
        args, kwargs = self._args_of(node)
        target = node.target
        ins = _Instr(node, "call", target, args, kwargs, fakes=fakes,
                     inplace_view=_is_inplace_view(target),
                     collective=is_collective(str(target)))
        inputs_static = all(a.name in self.static for a in node.all_input_nodes)
        if new and isinstance(target, torch._ops.OpOverload):
            ins.bufs = {id(f): r.slot_view(f, off, f.untyped_storage().nbytes())
                        for f, _, off in new}
            all_new = len(new) == len(fakes) and len(fakes) == len(flat_outputs(val))
            ins.kind = self._creating_kind(ins, target, val, fakes, all_new)
        elif (not new and not _is_mutating(target) and not _is_random(target)
              and (target is operator.getitem or isinstance(target, torch._ops.OpOverload))
              and fakes and all(storage_key(f) in r.slot for f in fakes)
              and all(isinstance(v, torch.Tensor) or v is None
                      for v in flat_outputs(val))
              and inputs_static and node.name not in self.scalar_slots):
            ins.kind = "view"  # metadata only, over memory that never moves
            ins.static = True
        elif (_is_mutating(target) and inputs_static and not _is_inplace_view(target)
              and isinstance(val, torch.Tensor) and storage_key(val) in r.slot):
            ins.static = True  # in-place on a value that never moves: returns that value
        if ins.kind in ("out", "factory", "empty", "arange"):
            ins.static = True
        if ins.static:
            self.static.add(node.name)
        self.instrs.append(ins)

    def _creating_kind(self, ins: _Instr, target: Any, val: Any, fakes: list[Any],
                       all_new: bool) -> str:
        if all_new and isinstance(val, torch.Tensor):
            buf = ins.bufs[id(val)]
            if target in FILL_CONST or target in FILL_ARG:
                ins.fill = (FILL_CONST.get(target), FILL_ARG.get(target))
                ins.result = buf
                self.counts["factory"] += 1
                return "factory"
            if target in EMPTY:
                ins.result = buf
                self.counts["factory"] += 1
                return "empty"
            if target in ARANGE:
                ins.result = buf
                self.counts["factory"] += 1
                return "arange"
        ov = self.runner.out_variant(target) if all_new else None
        if ov is not None:
            overload, names = ov
            outs = [ins.bufs[id(f)] for f in fakes]
            if len(names) == 1 and isinstance(val, (list, tuple)):
                ins.kwargs = {**ins.kwargs, names[0]: outs}
            else:
                ins.kwargs = {**ins.kwargs, **dict(zip(names, outs, strict=True))}
            ins.fn = overload
            ins.result = outs[0] if isinstance(val, torch.Tensor) else type(val)(outs)
            self.counts["out"] += 1
            return "out"
        self.counts["fallback"] += 1
        self.fallback_targets[str(target)] = None
        ins.static = all_new and all(
            v is None or (isinstance(v, torch.Tensor) and id(v) in ins.bufs)
            for v in flat_outputs(val))
        return "fallback"

    # ------------------------------------------------------------------ run
    def _resolve(self, x: Any, env: Mapping[str, Any]) -> Any:
        if isinstance(x, torch.fx.Node):
            return env[x.name]
        if isinstance(x, _Scalar):
            return self.scalars[x.index]
        if isinstance(x, (list, tuple)):
            return type(x)(self._resolve(a, env) for a in x)
        if isinstance(x, dict):
            return {k: self._resolve(v, env) for k, v in x.items()}
        return x

    def _execute(self, ins: _Instr, args: Any, kwargs: dict[str, Any]) -> Any:
        """Run one instruction with resolved arguments; returns the node's value."""
        kind = ins.kind
        if kind == "out":
            ins.fn(*args, **kwargs)
            return ins.result
        if kind == "factory":
            const, pos = ins.fill
            ins.result.fill_(const if pos is None else args[pos])
            return ins.result
        if kind == "empty":
            return ins.result
        if kind == "arange":
            a = list(args) + [None] * (3 - len(args))
            start, end, step = ((0, a[0], 1) if ins.fn == _aten.arange.default
                                else (a[0], a[1], a[2] if a[2] is not None else 1))
            _aten.arange.start_out(start, end, step, out=ins.result)
            return ins.result
        result = ins.fn(*args, **kwargs)
        if kind != "fallback":
            return result
        if ins.collective:  # asynchronous: the data is there only after the wait
            result = _wait_tensor(result)
        return self._copy_fallback(ins, result)

    def _copy_fallback(self, ins: _Instr, result: Any) -> Any:
        reals = [x for x in tree_leaves(result) if isinstance(x, torch.Tensor)]
        if len(reals) != len(ins.fakes):
            raise ExecutorError(f"op {ins.node.name!r} ({ins.node.target}) returned "
                                f"{len(reals)} tensors, the trace recorded {len(ins.fakes)}")
        swap: dict[int, torch.Tensor] = {}
        nbytes = 0
        for f, x in zip(ins.fakes, reals, strict=True):
            buf = ins.bufs.get(id(f))
            if buf is not None:
                buf.copy_(x)
                nbytes += x.untyped_storage().nbytes()
                swap[id(x)] = buf
        ins.copy_bytes = nbytes
        if isinstance(result, torch.Tensor):
            return swap.get(id(result), result)
        return type(result)(swap.get(id(x), x) if isinstance(x, torch.Tensor) else x
                            for x in result)

    def run_checked(self, env: dict[str, Any], *, check_addresses: bool = True) -> Any:
        """Run every instruction with errors naming the op and (optionally) address checks.

        ``env`` holds the loaded resident values (placeholders and constants) and receives
        every node's value.  Returns the graph output (``[loss]``).
        """
        r = self.runner
        self.extra_peak = self.extra_total = self.checked_values = 0
        first_seen: dict[int, tuple[int, _ViewMeta]] = {}
        rng = self._rng()
        if rng is not None:
            rng.start()
        skip: bool | None = None
        for idx, ins in enumerate(self.instrs):
            node = ins.node
            if node.name in self._skippable:
                if skip is None:
                    skip = self._inf_found(env)
                if skip:
                    continue
            args = self._resolve(ins.args, env)
            kwargs = self._resolve(ins.kwargs, env)
            if ins.inplace_view and isinstance(args[0], torch.Tensor):
                seen = first_seen.get(id(args[0]))
                if seen is None:
                    raise ExecutorError(f"op {node.name!r} ({node.target}) changes the shape "
                                        "of a resident tensor in place, which cannot be "
                                        "replayed step after step")
                self.restore.setdefault(seen[0], seen[1])
            self._reset_meta(idx, ins, env)
            if rng is not None:
                rng.before(node.name)
            try:
                with warnings.catch_warnings():
                    warnings.filterwarnings("error", message=".*was resized.*")
                    result = self._execute(ins, args, kwargs)
            except ExecutorError:
                raise
            except Exception as e:  # re-raised with the op named
                how = f" writing into its arena slot with {ins.fn}" if ins.kind == "out" else ""
                raise ExecutorError(f"op {node.name!r} ({node.target}) failed{how}: "
                                    f"{type(e).__name__}: {e}") from e
            if ins.kind == "fallback":
                self.extra_peak = max(self.extra_peak, ins.copy_bytes)
                self.extra_total += ins.copy_bytes
            env[node.name] = result
            for t in tree_leaves(result):
                if isinstance(t, torch.Tensor) and id(t) not in first_seen:
                    first_seen[id(t)] = (idx, (t.size(), t.stride(), t.storage_offset()))
            if rng is not None:
                rng.after(node.name)
            if check_addresses:
                self.checked_values += r.check_outputs(node, node.meta.get("val"), result)
        if rng is not None:
            rng.finish()
        self.skipped = bool(skip)
        if not skip:
            self.checked_runs += 1
            self._fast = None  # rebind to the values of this run
        return self._resolve(self.output.args[0], env)

    def _inf_found(self, env: Mapping[str, Any]) -> bool:
        """Whether the grad scaler's ``found_inf`` flag is set (a device sync)."""
        return bool(env[self._found_inf].item() != 0)

    def _reset_meta(self, idx: int, ins: _Instr, env: Mapping[str, Any]) -> None:
        """Give a result object whose shape an in-place view op changed its first shape."""
        meta = self.restore.get(idx)
        if meta is None:
            return
        obj = env.get(ins.node.name)
        if isinstance(obj, torch.Tensor):
            obj.as_strided_(*meta)

    def run_fast(self, env: dict[str, Any]) -> Any:
        """Run the bound instruction list (after one :meth:`run_checked` on ``env``).

        Until a checked run has run every op (a grad scaler may skip the update ops of the
        first steps), this is a checked run.
        """
        if self._fast is None:
            if not self.checked_runs:
                if not self._skippable:
                    raise ExecutorError("run the program once with run_checked first")
                return self.run_checked(env)
            self._fast = self._bind(env)
        self.skipped = False
        for f in self._fast:
            f()
        return self._resolve(self.output.args[0], env)

    # ------------------------------------------------------------------ bind
    def _rng(self) -> RngReplay | None:
        """The runner's RNG replay (:mod:`roam_core.runtime.rng`) when the step rewinds its
        RNG stream (``torch.utils.checkpoint``), else ``None`` (nothing to do)."""
        rng = getattr(self.runner, "rng", None)
        return rng if rng is not None and rng.active else None

    def _bind(self, env: dict[str, Any]) -> list[Callable[[], Any]]:
        out: list[Callable[[], Any]] = []
        rng = self._rng()
        if rng is not None:
            out.append(rng.start)
        guarded = False
        for idx, ins in enumerate(self.instrs):
            meta = self.restore.get(idx)
            obj = env.get(ins.node.name)
            if meta is not None and ins.static and isinstance(obj, torch.Tensor):
                out.append(functools.partial(obj.as_strided_, *meta))
            random = rng is not None and ins.node.name in rng.draws
            if random and rng is not None:  # (random implies rng; said for the checker)
                out.append(functools.partial(rng.before, ins.node.name))
            skippable = ins.node.name in self._skippable
            if skippable and not guarded:
                out.append(functools.partial(self._guard, env))
                guarded = True
            if ins.kind not in ("view", "empty"):  # else the checked run's value is reused
                call = self._bind_one(ins, env)
                out.append(functools.partial(self._unless_skipped, call) if skippable
                           else call)
            if random and rng is not None:
                out.append(functools.partial(rng.after, ins.node.name))
        if rng is not None:
            out.append(rng.finish)
        return out

    def _guard(self, env: Mapping[str, Any]) -> None:
        self.skipped = self._inf_found(env)

    def _unless_skipped(self, call: Callable[[], Any]) -> None:
        if not self.skipped:
            call()

    def _template(self, x: Any, env: Mapping[str, Any]) -> tuple[Any, bool]:
        """Static values bound as objects; ``(template, needs_resolution)``."""
        if isinstance(x, torch.fx.Node):
            if x.name in self.static:
                return env[x.name], False
            return _Reg(x.name), True
        if isinstance(x, _Scalar):
            return x, True
        if isinstance(x, (list, tuple)):
            parts = [self._template(a, env) for a in x]
            return type(x)(p for p, _ in parts), any(d for _, d in parts)
        if isinstance(x, dict):
            parts2 = {k: self._template(v, env) for k, v in x.items()}
            return {k: p for k, (p, _) in parts2.items()}, any(d for _, d in parts2.values())
        return x, False

    def _bind_one(self, ins: _Instr, env: dict[str, Any]) -> Callable[[], Any]:
        args, dyn_a = self._template(ins.args, env)
        kwargs, dyn_k = self._template(ins.kwargs, env)
        name, kind, static = ins.node.name, ins.kind, ins.static
        if kind == "factory":
            const, pos = ins.fill
            if pos is None or not dyn_a:
                return functools.partial(ins.result.fill_, const if pos is None else args[pos])
        if kind in ("out", "call"):
            fn = _kernel(ins.fn)
            if not dyn_a and not dyn_k:
                call = functools.partial(fn, *args, **kwargs)
                return call if static else functools.partial(_store, env, name, call)
            return _patched_call(fn, args, kwargs, env, self.scalars, name, static)
        scalars, resolve, execute = self.scalars, _resolver(), self._execute

        def run() -> None:
            a = resolve(args, env, scalars) if dyn_a else args
            k = resolve(kwargs, env, scalars) if dyn_k else kwargs
            value = execute(ins, a, k)
            if not static:
                env[name] = value
        return run


def _patched_call(fn: Any, args: Any, kwargs: dict[str, Any], env: dict[str, Any],
                  scalars: list[Any], name: str, static: bool) -> Callable[[], Any]:
    """A call whose changing arguments are written into reused argument containers.

    Top-level register and scalar arguments are patched by position; nested ones (a list
    of tensors with a register inside) are rebuilt.
    """
    a, k = list(args), dict(kwargs)
    resolve = _resolver()
    patches: list[tuple[Any, Any, Any]] = []  # (container, key, getter)
    for container, items in ((a, enumerate(args)), (k, kwargs.items())):
        for key, v in items:
            if isinstance(v, _Reg):
                patches.append((container, key, functools.partial(env.__getitem__, v.name)))
            elif isinstance(v, _Scalar):
                patches.append((container, key, functools.partial(scalars.__getitem__,
                                                                  v.index)))
            elif isinstance(v, (list, tuple, dict)) and _dynamic(v):
                patches.append((container, key, functools.partial(resolve, v, env, scalars)))

    def run() -> None:
        for container, key, get in patches:
            container[key] = get()
        value = fn(*a, **k)
        if not static:
            env[name] = value
    return run


def _dynamic(x: Any) -> bool:
    if isinstance(x, (_Reg, _Scalar)):
        return True
    if isinstance(x, (list, tuple)):
        return any(_dynamic(v) for v in x)
    if isinstance(x, dict):
        return any(_dynamic(v) for v in x.values())
    return False


def flat_leaves(x: Any) -> list[Any]:
    """The leaves of nested tuples, lists and dicts (dict values in insertion order).

    The numbering :class:`Program`'s ``scalar_slots`` use (``None`` is a leaf).

    Examples
    --------
    >>> flat_leaves(((1, [2, None]), {"a": 3}))
    [1, 2, None, 3]
    """
    out: list[Any] = []
    stack = [x]
    while stack:
        v = stack.pop()
        if isinstance(v, (list, tuple)):
            stack.extend(reversed(v))
        elif isinstance(v, dict):
            stack.extend(reversed(list(v.values())))
        else:
            out.append(v)
    return out


def replace_leaves(x: Any, new: Mapping[int, Any]) -> Any:
    """``x`` with the leaves numbered as in :func:`flat_leaves` replaced from ``new``."""
    counter = [0]

    def go(v: Any) -> Any:
        if isinstance(v, (list, tuple)):
            return type(v)([go(a) for a in v])
        if isinstance(v, dict):
            return type(v)({k: go(a) for k, a in v.items()})
        i = counter[0]
        counter[0] += 1
        return new.get(i, v)
    return go(x)


def _store(env: dict[str, Any], name: str, call: Callable[[], Any]) -> None:
    env[name] = call()


def _resolver() -> Callable[[Any, Mapping[str, Any], list[Any]], Any]:
    def resolve(x: Any, env: Mapping[str, Any], scalars: list[Any]) -> Any:
        if isinstance(x, _Reg):
            return env[x.name]
        if isinstance(x, _Scalar):
            return scalars[x.index]
        if isinstance(x, (list, tuple)):
            return type(x)(resolve(a, env, scalars) for a in x)
        if isinstance(x, dict):
            return {k: resolve(v, env, scalars) for k, v in x.items()}
        return x
    return resolve


def _is_inplace_view(target: Any) -> bool:
    return _INPLACE_VIEW is not None and _INPLACE_VIEW in getattr(target, "tags", ())


def flat_outputs(v: Any) -> list[Any]:
    """Output leaves, keeping ``None`` placeholders so positions line up."""
    if isinstance(v, (list, tuple)):
        return list(v)
    return [v]


def storage_key(t: torch.Tensor) -> StorageWeakRef:
    """The weak key of a tensor's storage (fake or real)."""
    return StorageWeakRef(t.untyped_storage())


class LiveSet:
    """Byte ranges of the storages live at the current step, to catch overlapping slots."""

    def __init__(self, graph: Graph, order: Sequence[OpId],
                 slot: Mapping[StorageWeakRef, tuple[TensorId, int]]) -> None:
        self.lts = lifetimes(graph, order)
        offset = dict(slot.values())
        self.active: dict[TensorId, tuple[int, int]] = {}  # tid -> (first byte, end byte)
        self.expiry: list[tuple[int, TensorId]] = []  # heap of (end step, tid)
        for t in graph.tensors.values():
            if t.producer is None and t.id in offset and t.size_bytes:
                self.active[t.id] = (offset[t.id], offset[t.id] + t.size_bytes)
        self.step = 0

    def advance(self, step: int) -> None:
        self.step = step
        while self.expiry and self.expiry[0][0] <= step:
            _, tid = heapq.heappop(self.expiry)
            self.active.pop(tid, None)

    def place(self, op: str, tid: TensorId, off: int, nbytes: int) -> None:
        if nbytes == 0:
            return
        end = off + nbytes
        for other, (lo, hi) in self.active.items():
            if other != tid and lo < end and off < hi:
                raise ExecutorError(
                    f"op {op!r}: storage {tid!r} at [{off}, {end}) overlaps storage {other!r} "
                    f"at [{lo}, {hi}), which is still live at step {self.step}: the plan's "
                    f"offsets are corrupt")
        lt = self.lts.get(tid)
        self.active[tid] = (off, end)
        heapq.heappush(self.expiry, (lt.end if lt is not None else self.step + 1, tid))
