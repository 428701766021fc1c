"""torch's min-cut partitioner as a recomputation baseline, mapped onto roam's traced step.

``torch.compile`` decides what the forward keeps for the backward with AOT autograd's
min-cut partitioner (``torch._functorch.partitioners.min_cut_rematerialization_partition``);
``torch._functorch.config.activation_memory_budget`` (0..1) trades memory for recompute:
1 is its default, runtime-optimised cut; lower values solve a knapsack over what else to
recompute (``0`` keeps only the step's inputs).  :func:`torch_min_cut` obtains *torch's own
decision* and turns it into a drop set of roam's graph of the same step:

1. **AOT autograd on the model's forward + loss**, on fake tensors (``FakeTensorMode``, no
   memory): ``aot_function`` with a partition function that captures the joint graph and
   runs ``min_cut_rematerialization_partition`` on a copy of it once per budget, under
   ``torch._functorch.config.patch(activation_memory_budget=b)``.  Parameters and buffers
   are static-lifetime inputs, as ``torch.compile`` marks them.  Nothing is compiled or run.
2. **torch's decision**: the forward graph's outputs beyond the user outputs (and the
   mutated buffers) are the values it *saves* for the backward; the forward nodes that also
   appear in the backward graph are the ones it *recomputes*.
3. **Matching** the joint graph's forward nodes with roam's forward and loss ops, inputs
   first (:class:`_Matcher`): both are aten-level traces of the same Python code, so a joint
   node matches the first unmatched roam op with the same op name and first output's shape
   and dtype whose tensor arguments come from the counterparts of its own (looking through
   views, clones and detaches that only one side has); repeated layers cannot be confused.
   In-place and functional variants are one name (functionalization turns ``relu_`` into
   ``relu``, batch norm's buffer updates into ``_native_batch_norm_legit_functional``'s extra
   outputs, which stand for roam's resident buffers); AOT's ``native_dropout`` matches roam's
   CPU dropout chain (``empty_like`` -> ``bernoulli_`` -> ``div_`` -> ``mul``: the output is
   the ``mul``, the bool mask roam's float mask); a ``clone`` eager autograd takes before an
   in-place op overwrites a value (MobileNet's ``ReLU6(inplace=True)``) holds that value.
   Every saved value must map onto roam's graph, and every roam forward storage the backward
   reads must come from a matched op; otherwise the baseline is not applicable and says why.
4. **The drop set**: every storage made by a forward or loss op that no saved value lives
   in.  roam re-runs what the backward needs from it, in chains, from the kept values --
   what the partitioner's backward graph does: the plan's extra FLOPs equal torch's re-runs
   counted with roam's per-op FLOPs.  A storage roam's rules do not let a plan drop
   (:func:`~roam_core.model.recompute_ops.recompute_blocker`; batch norm, which writes its
   running statistics in place) is kept and counted.

Which joint graph: AOT autograd's own, without inductor's decompositions and joint-graph
passes (what ``aot_eager`` with this partitioner sees; the partitioner's op lists are its
``compiler="inductor"`` defaults).  Under ``torch.compile`` with inductor the graph is
decomposed further first, so the choice can differ in detail.

Random ops: the partitioner's default cut (budget 1) saves random results; its knapsack at
low budgets may re-run them (here ``native_dropout``; under ``torch.compile`` inductor first
rewrites random ops into seeded ones, so such a re-run draws the same numbers).  The mapped
plan mirrors the decision: a mask torch keeps is kept, a mask torch re-runs is dropped and
re-drawn from the replayed generator state (:mod:`roam_core.trace.rng`), bit-exactly.

These are private torch APIs: every one is feature-detected, and a missing one (or a trace
that fails) makes the baseline "not applicable" with the reason, never an error.
"""

from __future__ import annotations

import copy
import logging
import operator
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from roam_core.base.units import format_bytes
from roam_core.model.graph import Graph, OpId, Phase, TensorId, TensorKind
from roam_core.model.recompute_ops import LATE_PHASES, recompute_blockers
from roam_core.trace.params import unique_named_buffers, unique_named_parameters

if TYPE_CHECKING:
    from roam_core.trace.traced_step import TracedStep

__all__ = ["MIN_CUT_BUDGETS", "MinCutDecision", "MinCutResult", "min_cut_available",
           "min_cut_method", "torch_min_cut"]

_logger = logging.getLogger(__name__)

#: Default ``activation_memory_budget`` values (1.0: torch's default, runtime-optimised cut).
MIN_CUT_BUDGETS = (0.1, 0.3, 0.5, 0.7, 0.9, 1.0)
_EARLY = (Phase.FORWARD, Phase.LOSS)
#: Ops that copy or re-view one tensor: matching looks through them when one trace has them
#: and the other does not (functionalization's clones, make_fx's detaches).
_PASS_THROUGH = frozenset({"view", "clone", "detach", "alias", "lift_fresh_copy", "expand",
                           "_to_copy", "t", "transpose", "permute", "squeeze", "unsqueeze",
                           "slice", "select", "as_strided"})
#: One name for ops that functionalization or decomposition spell differently.
_SAME = {"_unsafe_view": "view", "reshape": "view", "_reshape_alias": "view",
         "_native_batch_norm_legit": "native_batch_norm"}


def min_cut_method(budget: float) -> str:
    """The frontier method name of one budget: ``torch_min_cut_0.5``."""
    return f"torch_min_cut_{budget:g}" if budget != int(budget) else \
        f"torch_min_cut_{budget:.1f}"


@dataclass(frozen=True, slots=True)
class MinCutDecision:
    """torch's choice at one ``activation_memory_budget``, mapped onto roam's graph.

    Parameters
    ----------
    budget : float
        The ``activation_memory_budget``.
    method : str
        Its frontier method name (:func:`min_cut_method`).
    saved_values : int
        Tensors the partitioner's forward saves for the backward (parameters and inputs
        included).
    saved_bytes : int
        Their bytes, as the partitioner sizes them (each value's own elements), without the
        parameters, buffers and inputs (resident anyway).
    retained_bytes : int
        What the mapped plan keeps of it in roam's graph: the bytes of the forward storages
        the backward reads that the plan does not drop (a view keeps its whole storage;
        CPU dropout keeps a float mask where AOT's ``native_dropout`` saves a bool one).
    recomputed_nodes : int
        Forward nodes the partitioner's backward re-runs (views included).
    recomputed_flops : int
        Their FLOPs, by roam's per-op counts of the matched ops.
    dropped : tuple of TensorId
        The roam storages the mapped plan drops.
    kept_by_rules : tuple of TensorId
        Storages the partitioner recomputes but roam's rules keep.
    kept_by_rules_bytes : int
        Their bytes.
    """

    budget: float
    method: str
    saved_values: int
    saved_bytes: int
    retained_bytes: int
    recomputed_nodes: int
    recomputed_flops: int
    dropped: tuple[TensorId, ...]
    kept_by_rules: tuple[TensorId, ...] = ()
    kept_by_rules_bytes: int = 0


@dataclass(frozen=True)
class MinCutResult:
    """What :func:`torch_min_cut` found.

    Parameters
    ----------
    decisions : tuple of MinCutDecision
        One per budget that could be mapped (empty when not applicable).
    reason : str or None
        Why the baseline is not applicable (``None`` when it is).
    matched_ops : int
        roam forward and loss ops matched with joint-graph forward nodes.
    forward_ops : int
        roam forward and loss ops.
    joint_forward_nodes : int
        Forward nodes of the joint graph (``getitem`` excluded).
    notes : tuple of str
        What a reader should know (unmatched ops, per-budget failures).
    """

    decisions: tuple[MinCutDecision, ...] = ()
    reason: str | None = None
    matched_ops: int = 0
    forward_ops: int = 0
    joint_forward_nodes: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)


# ------------------------------------------------------------------ feature detection
def _apis() -> tuple[Any, Any, Any] | str:
    """``(aot_function, min_cut_rematerialization_partition, functorch config)`` or why not."""
    try:
        from torch._functorch import config as fconfig
        from torch._functorch.aot_autograd import aot_function
        from torch._functorch.partitioners import min_cut_rematerialization_partition
    except Exception as e:  # private APIs: any failure means "not here"
        return f"torch {torch.__version__} lacks AOT autograd's min-cut partitioner ({e})"
    if not hasattr(fconfig, "activation_memory_budget") or not hasattr(fconfig, "patch"):
        return (f"torch {torch.__version__} has no "
                "torch._functorch.config.activation_memory_budget")
    try:
        import networkx  # noqa: F401  (the partitioner's max-flow solver)
    except ImportError:
        return "the min-cut partitioner needs networkx, which is not installed"
    return aot_function, min_cut_rematerialization_partition, fconfig


def min_cut_available() -> str | None:
    """``None`` when torch's min-cut partitioner can be called here, else why not."""
    got = _apis()
    return got if isinstance(got, str) else None


# ------------------------------------------------------------------ AOT autograd
class _Captured(Exception):
    """Raised by the capturing partition function to stop AOT autograd after partitioning."""


@dataclass
class _Partition:
    joint: Any  # the joint GraphModule as the partitioner received it (a copy)
    num_fwd_outputs: int
    saved: dict[float, list[str]]  # budget -> saved node names
    recomputed: dict[float, list[str]]  # budget -> forward node names in the backward
    failed: dict[float, str]


def _partition_all(model: torch.nn.Module, example_inputs: Sequence[Any],
                   loss_fn: Callable[[Any], torch.Tensor] | None, budgets: Sequence[float],
                   params: Sequence[tuple[str, torch.Tensor]],
                   buffers: Sequence[tuple[str, torch.Tensor]], apis: tuple[Any, Any, Any]
                   ) -> _Partition:
    from torch._subclasses.fake_tensor import FakeTensorMode

    aot_function, min_cut, fconfig = apis
    fm = FakeTensorMode(allow_non_fake_inputs=True)
    dev = torch.device("cpu")
    with fm:
        fparams = [torch.empty(p.shape, dtype=p.dtype, device=dev).requires_grad_(
            p.requires_grad) for _, p in params]
        fbufs = [torch.empty(b.shape, dtype=b.dtype, device=dev) for _, b in buffers]
        finputs = [torch.empty(x.shape, dtype=x.dtype, device=dev)
                   if isinstance(x, torch.Tensor) else x for x in example_inputs]
    tensor_pos = [i for i, x in enumerate(finputs) if isinstance(x, torch.Tensor)]
    pnames = [n for n, _ in params]
    bnames = [n for n, _ in buffers]
    n_static = len(fparams) + len(fbufs)
    out = _Partition(None, 0, {}, {}, {})

    def step(ps: list, bs: list, *xs: Any) -> torch.Tensor:
        args = list(finputs)
        for i, x in zip(tensor_pos, xs, strict=True):
            args[i] = x
        state = {**dict(zip(pnames, ps, strict=True)), **dict(zip(bnames, bs, strict=True))}
        y = torch.func.functional_call(model, state, tuple(args))
        return y if loss_fn is None else loss_fn(y)

    def partition(joint: Any, joint_inputs: Any, **kw: Any) -> Any:
        kw["static_lifetime_input_indices"] = list(range(n_static))
        out.joint = _copy(joint)
        out.num_fwd_outputs = int(kw["num_fwd_outputs"])
        for b in budgets:
            try:
                with fconfig.patch(activation_memory_budget=float(b)):
                    fw, bw = min_cut(_copy(joint), joint_inputs, **kw)
            except Exception as e:
                out.failed[b] = f"{type(e).__name__}: {e}"
                continue
            outs = next(n for n in fw.graph.nodes if n.op == "output").args[0]
            saved = [o.name for o in outs[out.num_fwd_outputs:]
                     if isinstance(o, torch.fx.Node)
                     and isinstance(o.meta.get("val"), torch.Tensor)]
            fw_names = {n.name for n in fw.graph.nodes if n.op == "call_function"}
            out.saved[b] = saved
            out.recomputed[b] = [n.name for n in bw.graph.nodes
                                 if n.op == "call_function" and n.name in fw_names]
        raise _Captured

    def nop(gm: Any, _example: Any) -> Any:
        return gm

    g = aot_function(step, fw_compiler=nop, bw_compiler=nop, partition_fn=partition)
    try:
        with fm:
            g(fparams, fbufs, *[finputs[i] for i in tensor_pos])
    except _Captured:
        pass
    except Exception as e:  # AOT wraps errors raised inside the partition function
        if out.joint is None or not _caused_by_capture(e):
            raise
    if out.joint is None:
        raise RuntimeError("AOT autograd never called the partitioner")
    return out


def _copy(gm: Any) -> Any:
    with warnings.catch_warnings():  # torch's pytree deprecation noise on copying specs
        warnings.simplefilter("ignore", FutureWarning)
        return copy.deepcopy(gm)


def _caused_by_capture(e: BaseException | None) -> bool:
    seen = 0
    while e is not None and seen < 10:
        if isinstance(e, _Captured):
            return True
        e = e.__cause__ or e.__context__
        seen += 1
    return False


# ------------------------------------------------------------------ matching
def _name(target: Any) -> str:
    if target is operator.getitem:
        return "getitem"
    packet = getattr(target, "_overloadpacket", None)
    name = getattr(packet, "__name__", None) or str(target)
    name = name.split(".")[-1]
    if name.endswith("_") and not name.endswith("__"):
        name = name[:-1]
    if name.endswith("_functional"):
        name = name[: -len("_functional")]
    return _SAME.get(name, name)


def _sig(val: Any) -> tuple[Any, ...]:
    v = val[0] if isinstance(val, (tuple, list)) and val else val
    if isinstance(v, torch.Tensor):
        return (tuple(int(d) for d in v.shape), str(v.dtype))
    return ("scalar",)


def _key(node: Any) -> tuple[Any, ...]:
    return (_name(node.target), _sig(node.meta.get("val")))


def _tensor_args(node: Any) -> list[Any]:
    """The node inputs in argument order (flattened lists), tensors and other nodes."""
    got: list[Any] = []

    def collect(n: Any) -> Any:
        got.append(n)
        return n

    torch.fx.node.map_arg((node.args, node.kwargs), collect)
    return got


class _Matcher:
    """Matches the joint graph's forward nodes with roam's forward ops, inputs first.

    The joint graph's forward nodes are visited in order.  A node ``a`` matches the first
    unmatched roam op with the same key (:func:`_key`) whose tensor arguments come, one by
    one, from the roam counterparts of ``a``'s (looking through unmatched views and copies
    on both sides): candidates are the users of those counterparts.  ``getitem`` nodes
    follow their parents, element by element.  Repeated layers cannot be confused: a node
    only matches an op fed by its own inputs' counterparts.
    """

    def __init__(self, roam_nodes: list[Any], joint_nodes: list[Any],
                 placeholder_pairs: dict[Any, Any]) -> None:
        self.r, self.a = roam_nodes, joint_nodes
        self.in_r = set(roam_nodes)
        self.pos = {n: i for i, n in enumerate(roam_nodes)}
        self.r2a: dict[Any, Any] = {}
        self.a2r: dict[Any, Any] = {}
        self.absorbed: set[Any] = set()  # roam ops of a chain matched as a whole
        self.ph_r2a = placeholder_pairs
        self.ph_a2r = {v: k for k, v in placeholder_pairs.items()}
        self.by_key: dict[tuple[Any, ...], list[Any]] = {}
        for n in roam_nodes:
            if not _tensor_args(n):
                self.by_key.setdefault(_key(n), []).append(n)

    def match(self) -> None:
        for an in self.a:
            if _name(an.target) == "native_dropout" and self._dropout(an):
                continue
            rn = self._find(an)
            if rn is None:
                continue
            self._pair(rn, an)
            ra = {u.args[1]: u for u in rn.users if u.target is operator.getitem}
            aa = {u.args[1]: u for u in an.users if u.target is operator.getitem}
            for i, u in ra.items():
                if i in aa and _sig(u.meta.get("val")) == _sig(aa[i].meta.get("val")):
                    self._pair(u, aa[i])

    def _dropout(self, an: Any) -> bool:
        """Match AOT's ``native_dropout`` with roam's CPU dropout chain on the same input.

        AOT autograd decomposes dropout into ``native_dropout`` (output, bool mask); roam's
        eager trace records what the CPU kernel runs: ``empty_like(x)`` -> ``bernoulli_`` ->
        ``div_`` (the float mask) -> ``mul(x, mask)``.  The output pairs with the ``mul``,
        the mask with the ``div_`` (the finished mask's value).
        """
        args = _tensor_args(an)
        x = self.resolve_a(args[0]) if args else None
        if x is None:
            return False
        rx = self.a2r[x] if x in self.a2r else self.ph_a2r[x]
        items = {u.args[1]: u for u in an.users if u.target is operator.getitem}
        want = _sig(an.meta.get("val"))
        for u in sorted((u for u in rx.users if u in self.in_r and u not in self.r2a
                         and _name(u.target) == "mul" and _sig(u.meta.get("val")) == want),
                        key=self.pos.__getitem__):
            ins = _tensor_args(u)
            if len(ins) != 2 or self.resolve_r(ins[0]) is not rx:
                continue
            div = ins[1]
            chain = [div]
            for name in ("div", "bernoulli", "empty_like"):
                node = chain[-1]
                if not isinstance(node, torch.fx.Node) or _name(node.target) != name:
                    break
                if name != "empty_like":
                    chain.append(node.args[0])
            else:
                if self.resolve_r(chain[-1].args[0]) is not rx:
                    continue
                if 0 in items:
                    self._pair(u, items[0])
                if 1 in items:
                    self._pair(div, items[1])
                self.absorbed.update(n for n in chain[1:] if isinstance(n, torch.fx.Node))
                return True
        return False

    def _find(self, an: Any) -> Any:
        key = _key(an)
        args = _tensor_args(an)
        if not args:
            for rn in self.by_key.get(key, ()):
                if rn not in self.r2a:
                    return rn
            return None
        want = []
        for y in args:
            ay = self.resolve_a(y)
            if ay is None:
                return None
            want.append(self.a2r[ay] if ay in self.a2r else self.ph_a2r[ay])
        cands: list[Any] = []
        seen: set[Any] = set()
        stack = list(dict.fromkeys(want))
        while stack:
            x = stack.pop()
            for u in x.users:
                if u in seen or u not in self.in_r:
                    continue
                seen.add(u)
                if u in self.r2a:
                    continue
                if _key(u) == key:
                    cands.append(u)
                if _name(u.target) in _PASS_THROUGH:
                    stack.append(u)
        for rn in sorted(cands, key=self.pos.__getitem__):
            ra = _tensor_args(rn)
            if len(ra) == len(want) and all(self.resolve_r(x) is w
                                            for x, w in zip(ra, want, strict=True)):
                return rn
        return None

    def _pair(self, rn: Any, an: Any) -> None:
        self.r2a[rn] = an
        self.a2r[an] = rn

    def resolve_r(self, n: Any) -> Any:
        """The nearest matched op or paired placeholder that roam's ``n`` copies or views."""
        return self._resolve(n, self.r2a, self.ph_r2a)

    def resolve_a(self, n: Any) -> Any:
        """The same for a joint-graph node."""
        return self._resolve(n, self.a2r, self.ph_a2r)

    @staticmethod
    def _resolve(n: Any, matched: dict[Any, Any], ph: dict[Any, Any]) -> Any:
        seen = 0
        while isinstance(n, torch.fx.Node) and seen < 64:
            if n in matched or n in ph:
                return n
            if n.op != "call_function" or _name(n.target) not in _PASS_THROUGH:
                return None
            ins = n.all_input_nodes
            if len(ins) != 1:
                return None
            n = ins[0]
            seen += 1
        return None


def _forward_joint_nodes(joint: Any, num_fwd_outputs: int) -> list[Any]:
    """call_function nodes of the joint graph that the forward outputs depend on."""
    out_node = next(n for n in joint.graph.nodes if n.op == "output")
    outs = out_node.args[0][:num_fwd_outputs]
    need: set[Any] = set()
    stack = [o for o in outs if isinstance(o, torch.fx.Node)]
    while stack:
        n = stack.pop()
        if n in need:
            continue
        need.add(n)
        stack.extend(n.all_input_nodes)
    return [n for n in joint.graph.nodes if n in need and n.op == "call_function"]


# ------------------------------------------------------------------ the baseline
def torch_min_cut(traced: TracedStep, model: torch.nn.Module, example_inputs: Sequence[Any],
                  loss_fn: Callable[[Any], torch.Tensor] | None = None,
                  budgets: Sequence[float] = MIN_CUT_BUDGETS) -> MinCutResult:
    """torch's min-cut partitioner's decision at each budget, as drop sets of roam's graph.

    Parameters
    ----------
    traced : TracedStep
        roam's trace of the same step (:func:`roam_core.trace.trace_fx`).
    model : nn.Module
        The model traced (real or meta parameters; only shapes matter).
    example_inputs : sequence
        Its positional inputs, as given to the tracer.
    loss_fn : callable, optional
        As given to the tracer.
    budgets : sequence of float
        ``activation_memory_budget`` values in [0, 1].

    Returns
    -------
    MinCutResult
        ``reason`` says why the baseline is not applicable (torch lacks the APIs, AOT
        autograd cannot trace the model, or its graph does not map onto roam's).
    """
    apis = _apis()
    if isinstance(apis, str):
        return MinCutResult(reason=apis)
    bad = [b for b in budgets if not 0.0 <= float(b) <= 1.0]
    if bad:
        return MinCutResult(reason=f"activation_memory_budget must be in [0, 1], got {bad}")
    graph: Graph = traced.graph
    params = unique_named_parameters(model)
    buffers = unique_named_buffers(model)
    try:
        part = _partition_all(model, example_inputs, loss_fn, list(budgets), params, buffers,
                              apis)
    except Exception as e:
        _logger.debug("AOT autograd failed", exc_info=True)
        return MinCutResult(reason=f"AOT autograd could not trace the step: "
                                   f"{type(e).__name__}: {str(e)[:300]}")
    return _map(graph, traced, part, list(budgets))


def _map(graph: Graph, traced: TracedStep, part: _Partition,
         budgets: list[float]) -> MinCutResult:
    """torch's decisions as drop sets of ``graph``, or why they do not map onto it."""
    phase = {op.id: op.phase for op in graph.ops}
    rnodes = [n for n in traced.gm.graph.nodes if n.op == "call_function"
              and n.target is not operator.getitem and phase.get(n.name) in _EARLY]
    anodes = [n for n in _forward_joint_nodes(part.joint, part.num_fwd_outputs)
              if n.target is not operator.getitem]
    pairs, unpaired = _placeholder_pairs(traced, part)
    m = _Matcher(rnodes, anodes, pairs)
    m.match()
    matched = sum(1 for n in rnodes if n in m.r2a or n in m.absorbed)
    base = MinCutResult(matched_ops=matched, forward_ops=len(rnodes),
                        joint_forward_nodes=len(anodes))
    if not pairs:
        return _na(base, unpaired)
    late_read = _late_read(graph, phase)
    copies = _clone_holders(rnodes, m)
    unmatched = _unmatched_late_reads(graph, traced, m, late_read, copies)
    if unmatched:
        ex = ", ".join(f"{graph.tensors[s].producer} ({graph.op(graph.tensors[s].producer).target})"  # type: ignore[arg-type]  # forward storages are made
                       for s in unmatched[:4])
        return _na(base, f"{len(unmatched)} forward storages the backward reads come from ops "
                         f"the joint graph does not match (e.g. {ex})")
    notes = [f"{min_cut_method(b)}: the partitioner failed ({err[:200]})"
             for b, err in part.failed.items()]
    decisions = _decisions(graph, phase, m, part, budgets, late_read, copies, notes)
    if matched < len(rnodes):
        notes.append(f"{len(rnodes) - matched} of {len(rnodes)} roam forward ops have no "
                     "verified joint-graph counterpart (views and copies functionalization "
                     "adds or removes); no storage the backward reads comes from them")
    return MinCutResult(tuple(decisions), None, matched, len(rnodes), len(anodes),
                        tuple(notes))


def _placeholder_pairs(traced: TracedStep, part: _Partition) -> tuple[dict[Any, Any], str]:
    """roam's placeholders (parameters, buffers, optimizer state, inputs) paired with AOT's
    (parameters, buffers, inputs, tangents), the optimizer state and tangents left out
    (none when the counts differ), and the counts in words."""
    rph = [n for n in traced.gm.graph.nodes if n.op == "placeholder"]
    aph = [n for n in part.joint.graph.nodes if n.op == "placeholder"
           and not str(n.target).startswith("tangents")]
    roles = [r.kind for r in traced.placeholders]
    r_keep = [n for n, k in zip(rph, roles, strict=True)
              if k is not TensorKind.OPTIMIZER_STATE]
    counts = (f"the joint graph has {len(aph)} inputs, roam's step "
              f"{len(r_keep)} parameters, buffers and inputs")
    if len(r_keep) == len(aph):
        return dict(zip(r_keep, aph, strict=True)), counts
    return {}, counts


def _late_read(graph: Graph, phase: Mapping[OpId, Phase]) -> dict[TensorId, None]:
    """roam's forward and loss storages that the backward or the optimizer reads."""
    late_read: dict[TensorId, None] = {}
    for op in graph.ops:
        if op.phase in LATE_PHASES:
            for v in op.inputs:
                s = graph.storage_of(v)
                t = graph.tensors[s]
                if t.producer is not None and phase[t.producer] in _EARLY and t.size_bytes:
                    late_read[s] = None
    return late_read


def _clone_holders(rnodes: list[Any], m: _Matcher) -> dict[Any, list[Any]]:
    """roam-only copies, by the matched node whose value they hold.

    Eager autograd clones a value before an in-place op overwrites it (MobileNet's
    ReLU6(inplace=True): clone -> hardtanh_); the clone holds the value the functional joint
    graph names by the original node.
    """
    copies: dict[Any, list[Any]] = {}
    for n in rnodes:
        if n not in m.r2a and _name(n.target) == "clone" and n.all_input_nodes:
            src = m.resolve_r(n.all_input_nodes[0])
            if src is not None:
                copies.setdefault(src, []).append(n)
    return copies


def _unmatched_late_reads(graph: Graph, traced: TracedStep, m: _Matcher,
                          late_read: dict[TensorId, None],
                          copies: dict[Any, list[Any]]) -> list[TensorId]:
    """Storages the backward reads whose producer (or a view of them) matches nothing."""
    node_of = {n.name: n for n in traced.gm.graph.nodes}
    copy_nodes = {c for cs in copies.values() for c in cs}
    values_of: dict[TensorId, list[str]] = {}
    for a in graph.aliases:
        values_of.setdefault(a.storage, []).append(a.id)
    return [s for s in late_read
            if node_of[graph.tensors[s].producer] not in m.r2a
            and node_of[graph.tensors[s].producer] not in copy_nodes
            and not any(node_of.get(v) in m.r2a for v in values_of.get(s, ()))]


def _decisions(graph: Graph, phase: Mapping[OpId, Phase], m: _Matcher, part: _Partition,
               budgets: list[float], late_read: dict[TensorId, None],
               copies: dict[Any, list[Any]], notes: list[str]) -> list[MinCutDecision]:
    """One decision per budget whose saved values all map onto roam's graph (the others get
    a note, as do storages roam's rules keep)."""
    a_name = {n.name: n for n in part.joint.graph.nodes}
    why = recompute_blockers(graph)
    outputs = set(graph.outputs)  # the loss: a user output, never "saved"
    early_storages = [t for t in graph.tensors.values() if t.producer is not None
                      and phase[t.producer] in _EARLY and t.size_bytes
                      and t.id not in outputs]
    decisions: list[MinCutDecision] = []
    ruled_notes: dict[tuple[int, int, str], list[str]] = {}
    fl = {op.id: (op.flops or 0) for op in graph.ops}
    for b in budgets:
        if b not in part.saved:
            continue
        keep, lost, saved_bytes = _kept_storages(graph, m, a_name, copies, part.saved[b])
        if lost:
            notes.append(f"{min_cut_method(b)}: {len(lost)} saved values do not map onto "
                         f"roam's graph (e.g. {', '.join(lost[:4])}); skipped")
            continue
        drop: list[TensorId] = []
        ruled: list[TensorId] = []
        for t in early_storages:
            if t.id in keep:
                continue
            if why[t.producer] is None:  # type: ignore[index]  # early storages are made
                drop.append(t.id)
            elif t.id in late_read:
                ruled.append(t.id)
        dropped = set(drop)
        rec = part.recomputed[b]
        rflops = sum(fl.get(m.a2r[a_name[n]].name, 0) for n in rec
                     if n in a_name and a_name[n] in m.a2r)
        decisions.append(MinCutDecision(
            b, min_cut_method(b), len(part.saved[b]), saved_bytes,
            sum(graph.tensors[s].size_bytes for s in late_read if s not in dropped),
            len(rec), rflops, tuple(drop), tuple(ruled),
            sum(graph.tensors[s].size_bytes for s in ruled)))
        if ruled:
            first = graph.tensors[ruled[0]].producer
            ruled_notes.setdefault(
                (len(ruled), decisions[-1].kept_by_rules_bytes, str(why[first])),  # type: ignore[index]  # made
                []).append(
                min_cut_method(b))
    for (n, nbytes, reason), methods in ruled_notes.items():
        notes.append(f"{', '.join(methods)}: {n} storages ({format_bytes(nbytes)}) the "
                     f"partitioner recomputes are kept by roam's rules (e.g. their producer "
                     f"{reason})")
    return decisions


def _kept_storages(graph: Graph, m: _Matcher, a_name: dict[str, Any],
                   copies: dict[Any, list[Any]], saved: list[str],
                   ) -> tuple[set[TensorId], list[str], int]:
    """The roam storages holding the values torch saves, the saved values that map onto no
    roam value, and the saved bytes (parameters, buffers and inputs left out)."""
    keep: set[TensorId] = set()
    lost: list[str] = []
    saved_bytes = 0
    for name in saved:
        an = a_name.get(name)
        tgt = m.resolve_a(an) if an is not None else None
        if tgt is None and _mutated_buffer_value(graph, m, an):
            continue
        if tgt is None:
            lost.append(name)
            continue
        assert an is not None  # tgt was resolved from it
        if an.op != "placeholder" and tgt.op != "placeholder":
            saved_bytes += _val_bytes(an.meta.get("val"))
        rn = m.ph_a2r[tgt] if tgt.op == "placeholder" else m.a2r[tgt]
        for holder in ([] if tgt.op == "placeholder" else [rn]) + copies.get(rn, []):
            s = _storage_of_node(graph, holder.name)
            if s is not None:
                keep.add(s)
    return keep, lost, saved_bytes


def _na(base: MinCutResult, reason: str) -> MinCutResult:
    return MinCutResult((), f"torch's min-cut decision does not map onto roam's graph: "
                            f"{reason}", base.matched_ops, base.forward_ops,
                        base.joint_forward_nodes)


def _mutated_buffer_value(graph: Graph, m: _Matcher, an: Any) -> bool:
    """Whether joint node ``an`` is the new value of a buffer the op updates in place in roam.

    Functionalization turns batch norm's in-place running-statistics update into extra
    outputs (``_native_batch_norm_legit_functional``'s 4th and 5th); the backward's
    formula reads them.  In roam's graph the op writes the resident buffers in place.
    """
    if an is None or an.target is not operator.getitem or an.args[0] not in m.a2r:
        return False
    rparent = m.a2r[an.args[0]]
    n_out = len(rparent.meta.get("val") or ()) if isinstance(rparent.meta.get("val"),
                                                               (tuple, list)) else 1
    if int(an.args[1]) < n_out:
        return False
    try:
        op = graph.op(rparent.name)
    except Exception:
        return False
    return bool(op.mutates) and all(graph.tensors[s].resident for s in op.mutates)


def _storage_of_node(graph: Graph, name: str) -> TensorId | None:
    try:
        return graph.storage_of(name)
    except Exception:
        return None


def _val_bytes(v: Any) -> int:
    if isinstance(v, torch.Tensor):
        return int(v.numel()) * v.element_size()
    return 0
