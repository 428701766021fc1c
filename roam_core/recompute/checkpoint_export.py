"""Which modules to wrap in ``torch.utils.checkpoint``, and their selective policies, so that
stock PyTorch drops and re-runs what a budget plan does.

How a plan's drop becomes a checkpoint
--------------------------------------
With non-reentrant ``torch.utils.checkpoint`` around a module, every tensor autograd saves
*inside* the module's call is rebuilt in the backward by re-running the call; a selective
policy (``create_selective_checkpoint_contexts``) caches the outputs of the ops it marks
``MUST_SAVE`` instead, and re-runs the others.  A plan's *drops* are the storages the
backward reads that the plan frees after the forward.  Torch drops one too when a wrapped
module's call holds the op that makes it *and* every op that saves it for the backward (the
backward ops reading it carry the module of the forward op that saved it, ``Op.module``):
its region is the deepest module containing all of them that can be wrapped (a module whose
``forward`` runs; not a ``ModuleList``).  The modules wrapped are those regions, outermost
first (a region inside a wrapped one needs no wrapper of its own).

Inside a wrapped module, per op of its call, in forward order (:func:`_decide`):

* a random op whose draw the trace records (``Op.recomputable is True``) is re-run:
  checkpointing restores the generator (``preserve_rng_state``), and a cached random op
  would shift the stream under every later re-run one;
* an op torch must not re-run (not bit-reproducible, an explicit generator) is saved;
* an op that writes in place, or makes a storage written in place later, is re-run: torch
  refuses a cached tensor whose version moved (CPU dropout's mask ``empty_like`` ->
  ``bernoulli_`` -> ``div_``, a batch norm's output under an in-place ReLU are rebuilt in
  the backward even where the plan keeps them: fewer bytes than the plan, more FLOPs);
* an op making a storage the plan drops is re-run; one making a storage the plan keeps for
  the backward is saved; everything else (views, temporaries) is re-run when needed.

Buffers move once a step, as in eager: the re-run of batch norm gets no running statistics
and other in-place writes to buffers are re-run on a copy
(:mod:`roam_core.runtime.checkpoint_policy`).

What a checkpoint cannot express
--------------------------------
* a drop whose maker and savers share no wrappable module below the top level (GPT-2's
  residual stream between blocks, an MLP's layers in one ``Sequential``): only checkpointing
  the whole model would drop it, and that re-runs all of it at once in the backward;
* a drop that is a wrapped module's input: ``torch.utils.checkpoint`` keeps a region's inputs
  until its backward;
* a drop made by an op torch must not re-run;
* a module that writes in place a storage it did not make, or whose calls run different
  ops, is not wrapped.  Writes to buffers are fine: the re-run leaves buffers alone
  (batch norm without running statistics, ``num_batches_tracked += 1`` on a copy).

Each unexpressed drop is listed with its bytes (:class:`UnexpressedDrop`), and so is what the
policy holds that the plan frees (:class:`ExtraSaved`: region inputs, saved outputs the plan
does not keep).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence

from roam_core.base.checks import at_least
from roam_core.base.errors import PlanFormatError
from roam_core.model.checkpoint_policy import (
    CheckpointPolicyExport,
    Decision,
    ExtraSaved,
    ModulePolicy,
    OpPolicy,
    UnexpressedDrop,
)
from roam_core.model.graph import Graph, Op, OpId, Phase, TensorId, TensorKind
from roam_core.model.plan import Plan
from roam_core.model.recompute_ops import LATE_PHASES, op_flops, running_stats_writes
from roam_core.recompute.baselines import find_blocks

__all__ = ["SAC_IGNORED_TARGETS", "export_checkpoint_policy", "module_calls", "region_of"]

#: Ops torch's selective-checkpoint modes pass through without asking the policy
#: (``torch.utils.checkpoint.SAC_IGNORED_OPS``): they are not counted in occurrences.
SAC_IGNORED_TARGETS = frozenset({"aten.detach.default", "prim.device.default"})
_EARLY = frozenset({Phase.FORWARD, Phase.LOSS})


def export_checkpoint_policy(graph: Graph, plan: Plan, *,
                             wrappable: Callable[[str], bool] | None = None,
                             max_blocks: int = 1) -> CheckpointPolicyExport:
    """The selective checkpointing policy that drops and re-runs what ``plan`` does.

    Parameters
    ----------
    graph : Graph
        The graph the plan was made for (it records each op's module).
    plan : Plan
        A plan, with or without recomputation (without: nothing is wrapped).
    wrappable : callable, optional
        ``wrappable(path)``: whether the module at ``path`` has a ``forward`` to wrap.
        Default (no model at hand): the modules some op runs in directly, which leaves out
        ``ModuleList`` containers but also modules that only call their children.
    max_blocks : int
        The most repeated blocks (:func:`~roam_core.recompute.baselines.find_blocks`) one
        wrapped module may hold.  Torch re-runs a checkpointed call all at once when its
        backward starts, so a module of several blocks (a whole encoder) holds all their
        activations again there: in eager it saves little, whatever roam's order of the
        same ops would give.  Default 1: drops across blocks (a residual stream) are not
        expressed.

    Returns
    -------
    CheckpointPolicyExport

    Raises
    ------
    PlanFormatError
        The plan was made for another graph.
    ConfigError
        ``max_blocks`` is below 1.
    """
    if plan.graph_fingerprint != graph.fingerprint():
        raise PlanFormatError(
            f"the plan was made for graph {plan.graph_fingerprint[:12]} "
            f"({plan.graph_name!r}), not for this graph {graph.fingerprint()[:12]} "
            f"({graph.name!r})")
    at_least("max_blocks", max_blocks, 1)
    if wrappable is None:
        direct = {op.module for op in graph.ops if op.phase in _EARLY}
        wrappable = direct.__contains__
    ex = _Exporter(graph, plan)
    common = {s: region_of(graph, s, ex.late) for s in ex.dropped}
    need = {s: _wrappable_ancestor(common[s], wrappable) for s in ex.dropped}
    accepted, refused = ex.choose(need, find_blocks(graph), max_blocks)
    decided = {o: d for p in accepted for c in ex.calls[p]
               for o, d in ex.decisions(c).items()}
    inputs = ex.inputs([c for p in accepted for c in ex.calls[p]])
    return CheckpointPolicyExport(
        graph_fingerprint=plan.graph_fingerprint, graph_name=plan.graph_name,
        plan_method=plan.method,
        modules=tuple(ex.module_policy(p, decided) for p in accepted),
        unexpressed=ex.unexpressed(common, need, accepted, refused, decided, inputs),
        extra_saved=ex.extra_saved(decided, inputs),
        dropped_bytes=sum(graph.tensors[s].size_bytes for s in ex.dropped),
        planned_peak_bytes=plan.planned_peak_bytes,
        recompute_flops=sum(ex.rerun_flops(p, decided) for p in accepted))


# ------------------------------------------------------------------ structure
def _late_readers(graph: Graph) -> dict[TensorId, list[OpId]]:
    out: dict[TensorId, list[OpId]] = {}
    for op in graph.ops:
        if op.phase in LATE_PHASES:
            for s in graph.storages_read(op.id):
                out.setdefault(s, []).append(op.id)
    return out


def _ancestors(path: str) -> list[str]:
    """``"a.b.c"`` -> ``["a", "a.b", "a.b.c"]`` (``""`` -> ``[]``)."""
    if not path:
        return []
    parts = path.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root + ".")


def _wrappable_ancestor(path: str, wrappable: Callable[[str], bool]) -> str:
    for a in reversed(_ancestors(path)):
        if wrappable(a):
            return a
    return ""


def module_calls(graph: Graph) -> dict[str, list[tuple[OpId, ...]]]:
    """Per module path, its calls: runs of consecutive forward/loss ops inside it.

    A run that repeats one sequence of (op, module) ``k`` times is ``k`` calls (a shared
    module called twice in a row; the graph records no call boundaries).

    Examples
    --------
    >>> from roam_core.model.graph import Graph, Op, Phase
    >>> g = Graph.build([Op("a", "aten.relu.default", Phase.FORWARD, module="f.0"),
    ...                  Op("b", "aten.relu.default", Phase.FORWARD, module="f.1"),
    ...                  Op("c", "aten.relu.default", Phase.FORWARD, module="f.1")], [])
    >>> module_calls(g)
    {'f': [('a', 'b', 'c')], 'f.0': [('a',)], 'f.1': [('b',), ('c',)]}
    """
    out: dict[str, list[list[OpId]]] = {}
    last: dict[str, int] = {}
    k = 0
    for op in graph.ops:
        if op.phase not in _EARLY:
            continue
        for a in _ancestors(op.module):
            if last.get(a) == k - 1:
                out[a][-1].append(op.id)
            else:
                out.setdefault(a, []).append([op.id])
            last[a] = k
        k += 1
    return {p: [c for run in cs for c in _split_repeats(graph, run)]
            for p, cs in sorted(out.items())}


def _split_repeats(graph: Graph, run: Sequence[OpId]) -> list[tuple[OpId, ...]]:
    """``run`` cut into its shortest period of (target, module), when it has one."""
    key = [(graph.op(o).target, graph.op(o).module) for o in run]
    n = len(key)
    for period in range(1, n // 2 + 1):
        if n % period == 0 and key == key[:period] * (n // period):
            return [tuple(run[i:i + period]) for i in range(0, n, period)]
    return [tuple(run)]


def region_of(graph: Graph, storage: TensorId,
              late: Mapping[TensorId, Sequence[OpId]] | None = None) -> str:
    """The deepest module holding the op that makes ``storage`` and every op saving it.

    ``""`` when they share no module below the top level.
    """
    if late is None:
        late = _late_readers(graph)
    producer = graph.tensors[storage].producer
    assert producer is not None
    mods = [graph.op(producer).module, *(graph.op(r).module for r in late.get(storage, ()))]
    parts = mods[0].split(".") if mods[0] else []
    for m in mods[1:]:
        other = m.split(".") if m else []
        n = 0
        while n < min(len(parts), len(other)) and parts[n] == other[n]:
            n += 1
        parts = parts[:n]
    return ".".join(parts)


def _blocked(op: Op) -> str | None:
    """Why torch's checkpoint must not re-run ``op`` (``None``: it may)."""
    if op.random:
        return None if op.recomputable is True else (
            "draws random numbers from a generator checkpointing does not restore")
    if op.recomputable is False:
        return "is not bit-reproducible (or not an ATen op)"
    return None


class _Exporter:
    """The graph-wide facts the decisions read, and the decisions per module call."""

    def __init__(self, graph: Graph, plan: Plan) -> None:
        self.graph = graph
        self.late = _late_readers(graph)
        #: the plan's drops: storages the backward reads that the plan frees after the
        #: forward (storages only re-run on the way to those are not drops)
        self.dropped = {s: None for r in plan.recompute for s in graph.storages_created(r.source)
                        if graph.tensors[s].size_bytes and s in self.late}
        self.calls = module_calls(graph)
        #: storages a forward op writes in place (batch norm's statistics aside)
        self.rewritten = frozenset(
            s for op in graph.ops if op.phase in _EARLY
            for s in set(op.mutates) - running_stats_writes(graph, op))

    def counted(self, call: Sequence[OpId]) -> list[OpId]:
        """The ops of a call torch's policy sees (in order)."""
        return [o for o in call if self.graph.op(o).target not in SAC_IGNORED_TARGETS]

    # -------------------------------------------------------------- regions
    def choose(self, need: Mapping[TensorId, str], blocks: Sequence[str], max_blocks: int
               ) -> tuple[list[str], dict[str, str]]:
        """The modules to wrap (in forward order, none inside another), and why the others
        were not: outermost first, each kept when it is safe, holds at most ``max_blocks``
        blocks and frees more bytes than it holds."""
        wanted = sorted({p for p in need.values() if p}, key=lambda p: (p.count("."), p))
        accepted: list[str] = []
        refused: dict[str, str] = {}
        for path in wanted:
            if any(_inside(path, a) for a in accepted):
                continue
            why = self.unsafe(self.calls.get(path, []))
            held = [b for b in blocks if _inside(b, path)]
            if why is None and len(held) > max_blocks:
                why = (f"it holds {len(held)} blocks ({held[0]}, ...), which torch would re-run "
                       f"at once in the backward (max_blocks={max_blocks})")
            if why is None:
                why = self.unprofitable(path, need)
            if why is not None:
                refused[path] = why
                continue
            accepted.append(path)
        pos = {o: i for i, o in enumerate(self.graph.op_ids)}
        return sorted(accepted, key=lambda p: pos[self.calls[p][0][0]]), refused

    def unsafe(self, calls: Sequence[tuple[OpId, ...]]) -> str | None:
        """Why a module may not be wrapped (``None``: it may)."""
        g = self.graph
        if not calls:
            return "it runs no forward op"
        if len({tuple(g.op(o).target for o in self.counted(c)) for c in calls}) > 1:
            return f"its {len(calls)} calls run different ops"
        for call in calls:
            made: set[TensorId] = set()
            for o in call:
                op = g.op(o)
                writes = set(op.mutates) - running_stats_writes(g, op)
                for s in writes - made - self.buffers(writes):
                    return (f"it writes {g.tensors[s].name or s!r} in place, which it did "
                            f"not make ({op.target}): a re-run would write it twice")
                why = _blocked(op)
                if why is not None and (writes or self.rewritten.intersection(
                        g.storages_created(o))):
                    return (f"{op.target} {why}, and its result is written in place, so "
                            "torch can neither cache nor re-run it")
                made.update(g.storages_created(o))
        return None

    def buffers(self, storages: Iterable[TensorId]) -> set[TensorId]:
        """The resident buffers among ``storages``: a re-run writes them on a copy (the
        runtime's re-run mode), so the forward's write stays the only one."""
        g = self.graph
        return {s for s in storages
                if g.tensors[s].kind is TensorKind.BUFFER and g.tensors[s].resident}

    def unprofitable(self, path: str, need: Mapping[TensorId, str]) -> str | None:
        """Why wrapping ``path`` holds at least as many bytes as it drops (``None``: it
        pays).  A wrapped module holds its inputs until its backward, and every output of
        an op it saves: a lone ``nn.Dropout`` would hold an input as large as the mask."""
        g = self.graph
        decided = {o: d for c in self.calls[path] for o, d in self.decisions(c).items()}
        inputs = self.inputs(self.calls[path])
        gain = 0
        for s in self.dropped:
            made_by = g.tensors[s].producer
            if (_inside(need[s], path) and s not in inputs and made_by is not None
                    and decided.get(made_by) is Decision.RECOMPUTE):
                gain += g.tensors[s].size_bytes
        held = sum(g.tensors[s].size_bytes for s in inputs
                   if s not in self.late or s in self.dropped)
        held += sum(e.size_bytes for e in self.extra_saved(decided, {}))
        if gain > held:
            return None
        return f"wrapping it would hold {held} B (its inputs) for {gain} B of drops"

    def inputs(self, calls: Sequence[Sequence[OpId]]) -> dict[TensorId, str]:
        """Storages made before a wrapped call and read in it (torch keeps them), by
        module."""
        g = self.graph
        out: dict[TensorId, str] = {}
        for call in calls:
            made: set[TensorId] = set()
            for o in call:
                for s in g.storages_read(o):
                    t = g.tensors[s]
                    if s not in made and not t.resident and t.size_bytes:
                        out.setdefault(s, g.op(call[0]).module)
                made.update(g.storages_created(o))
        return out

    # -------------------------------------------------------------- decisions
    def decisions(self, call: Sequence[OpId]) -> dict[OpId, Decision]:
        """The decision for each op torch's policy sees in one call."""
        return {o: self.decide(self.graph.op(o)) for o in self.counted(call)}

    def decide(self, op: Op) -> Decision:
        g = self.graph
        if op.random and op.recomputable is True:
            return Decision.RECOMPUTE
        if _blocked(op) is not None:
            return Decision.SAVE
        if set(op.mutates) - running_stats_writes(g, op):
            return Decision.RECOMPUTE
        created = [s for s in g.storages_created(op.id) if g.tensors[s].size_bytes]
        if any(s in self.dropped or s in self.rewritten for s in created):
            return Decision.RECOMPUTE
        kept = sum(g.tensors[s].size_bytes for s in created if s in self.late)
        # torch caches every output of a saved op: batch norm's, when only its statistics
        # are read later, is re-run rather than held
        rest = sum(g.tensors[s].size_bytes for s in created if s not in self.late)
        return Decision.SAVE if kept and rest <= kept else Decision.RECOMPUTE

    def module_policy(self, path: str, decided: Mapping[OpId, Decision]) -> ModulePolicy:
        """One decision per op for every call of ``path``: saved only where every call
        saves it (the calls run the same ops: :meth:`unsafe`)."""
        g = self.graph
        per_call = [self.counted(c) for c in self.calls[path]]
        ops: list[OpPolicy] = []
        seen: Counter[str] = Counter()
        for i, o in enumerate(per_call[0]):
            target = g.op(o).target
            save = all(decided[c[i]] is Decision.SAVE for c in per_call)
            ops.append(OpPolicy(target, seen[target],
                                Decision.SAVE if save else Decision.RECOMPUTE, o))
            seen[target] += 1
        return ModulePolicy(path, len(per_call), tuple(ops))

    # -------------------------------------------------------------- accounting
    def unexpressed(self, common: Mapping[TensorId, str], need: Mapping[TensorId, str],
                    accepted: Sequence[str], refused: Mapping[str, str],
                    decided: Mapping[OpId, Decision], inputs: Mapping[TensorId, str]
                    ) -> tuple[UnexpressedDrop, ...]:
        g = self.graph
        out: list[UnexpressedDrop] = []
        for s in self.dropped:
            t = g.tensors[s]
            region, why = need[s], None
            if not common[s]:
                why = ("the op making it and the ops saving it for the backward share no "
                       "module below the top level")
            elif not region:
                why = (f"no module holding the op making it and the ops saving it (the "
                       f"deepest is {common[s]!r}) has a forward of its own to wrap")
            elif not any(_inside(region, a) for a in accepted):
                why = f"module {region!r} is not wrapped: {refused[region]}"
            elif t.producer is not None and decided.get(t.producer) is Decision.SAVE:
                why = f"torch must not re-run {g.op(t.producer).target}"
            elif s in inputs:
                why = (f"it is an input of checkpointed module {inputs[s]!r}, which "
                       "torch.utils.checkpoint keeps until that module's backward")
            if why is not None:
                out.append(UnexpressedDrop(s, t.size_bytes, why))
        return tuple(out)

    def extra_saved(self, decided: Mapping[OpId, Decision], inputs: Mapping[TensorId, str]
                    ) -> tuple[ExtraSaved, ...]:
        """What the policy holds for the backward that the plan frees: inputs of wrapped
        calls, and outputs of saved ops the backward does not read."""
        g = self.graph
        out: dict[TensorId, ExtraSaved] = {}
        for s, module in inputs.items():
            if s not in self.dropped and s not in self.late:
                out[s] = ExtraSaved(s, g.tensors[s].size_bytes,
                                    f"an input of checkpointed module {module!r}")
        for o, d in decided.items():
            if d is not Decision.SAVE:
                continue
            op = g.op(o)
            for s in g.storages_created(o):
                t = g.tensors[s]
                if s in self.late or s in self.dropped or not t.size_bytes or s in out:
                    continue
                why = _blocked(op)
                out[s] = ExtraSaved(s, t.size_bytes, (
                    f"an output of {op.target}, which torch must not re-run: it {why}"
                    if why else f"an output of {op.target}, cached with those the backward "
                    "reads"))
        return tuple(out.values())

    def rerun_flops(self, path: str, decided: Mapping[OpId, Decision]) -> int:
        """FLOPs torch's re-runs of ``path`` add: the re-run ops of each call up to the last
        one whose result a backward op of the module reads (torch stops the re-run there).
        """
        g = self.graph

        def saved_inside(s: TensorId) -> bool:
            return any(_inside(g.op(r).module, path) for r in self.late.get(s, ()))

        total = 0
        for call in self.calls[path]:
            needed = [i for i, o in enumerate(call)
                      if any(saved_inside(g.storage_of(v)) for v in g.op(o).outputs)]
            stop = needed[-1] if needed else -1
            total += sum(op_flops(g, g.op(o)) for o in call[:stop + 1]
                         if decided.get(o) is Decision.RECOMPUTE)
        return total
