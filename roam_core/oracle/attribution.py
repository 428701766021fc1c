"""Memory by module: which ``nn.Module`` holds the bytes live at the peak of an order.

Every storage is attributed to one module path (:func:`tensor_module`):

* a storage an op allocates belongs to that op's module (``Op.module``): an activation to
  the module whose forward made it, a gradient to the module whose backward made it, an
  optimizer state created in the step to its parameter's module;
* a resident storage belongs to the module owning its name (``Tensor.name``):
  ``h.0.attn.c_attn.weight`` to ``h.0.attn.c_attn``, and its gradient or optimizer state
  (``...weight.grad``, ``...weight.exp_avg``) to the same module; a resident storage
  without a name (the batch, constants) to the top level ``""``.

:func:`bytes_at_peak_by_module` splits the bytes live at the peak step (rounded as in
:func:`~roam_core.oracle.simulate.simulate`, resident bytes included) by module and kind; the
parts add up to the peak exactly.  Module paths nest by dots; :func:`subtree_bytes` adds
every module's bytes to all its ancestors (what an icicle shows).  Graphs traced before
module attribution (schema 1) put everything at the top level.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from roam_core.model.graph import (
    DEFAULT_ALIGNMENT_BYTES,
    Graph,
    OpId,
    Phase,
    Tensor,
    TensorId,
    TensorKind,
    round_size,
)
from roam_core.oracle.simulate import lifetimes, simulate

__all__ = [
    "ModuleBytes",
    "PeakAttribution",
    "bytes_at_peak_by_module",
    "bytes_live_at_step_by_module",
    "depth_bytes",
    "in_module",
    "kind_bytes_per_step",
    "module_ancestors",
    "module_bytes_per_step",
    "repeated_blocks",
    "subtree_bytes",
    "tensor_module",
    "tensor_modules",
    "top_level",
]

#: Tensor kinds whose names are ``<parameter>.<suffix>`` (``.grad``, ``.exp_avg``...).
_PER_PARAMETER = (TensorKind.GRADIENT, TensorKind.OPTIMIZER_STATE)


def tensor_module(graph: Graph, t: Tensor) -> str:
    """The module path a storage is attributed to (see the module docstring).

    Examples
    --------
    >>> from roam_core.model.samples import tiny_train_step
    >>> g = tiny_train_step()
    >>> tensor_module(g, g.tensors["mm"])
    ''
    """
    if t.producer is not None:
        return graph.op(t.producer).module
    if not t.name:
        return ""
    owner = t.name.rpartition(".")[0]
    if t.kind in _PER_PARAMETER:
        owner = owner.rpartition(".")[0]
    return owner


def tensor_modules(graph: Graph) -> dict[TensorId, str]:
    """:func:`tensor_module` of every storage."""
    return {tid: tensor_module(graph, t) for tid, t in graph.tensors.items()}


def in_module(path: str, module: str) -> bool:
    """True when ``path`` is ``module`` or lies inside it (``""`` only matches itself).

    Examples
    --------
    >>> in_module("h.0.attn", "h.0"), in_module("h.10", "h.1"), in_module("h.0", "")
    (True, False, False)
    """
    return path == module or (bool(module) and path.startswith(module + "."))


def module_ancestors(path: str) -> list[str]:
    """``"h.0.attn"`` -> ``["h", "h.0", "h.0.attn"]`` (``[]`` for the top level)."""
    if not path:
        return []
    parts = path.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def top_level(path: str) -> str:
    """The first component of a module path (``""`` stays ``""``)."""
    return path.split(".", 1)[0]


@dataclass(frozen=True, slots=True)
class ModuleBytes:
    """Bytes of one module (its own storages, not its submodules') live at one step.

    Parameters
    ----------
    module : str
        Full module path (``""``: the top level).
    total_bytes : int
        Rounded bytes.
    bytes_by_kind : Mapping of str to int
        The same bytes split by :class:`~roam_core.model.graph.TensorKind` value.
    tensors : tuple of TensorId
        The storages, largest first.
    """

    module: str
    total_bytes: int
    bytes_by_kind: Mapping[str, int]
    tensors: tuple[TensorId, ...]


@dataclass(frozen=True)
class PeakAttribution:
    """The bytes live at one step of an order, by module.

    Parameters
    ----------
    step : int
        The step (the peak step for :func:`bytes_at_peak_by_module`; ``-1``: empty order).
    total_bytes : int
        Bytes live at that step, resident included (the peak).
    alignment_bytes : int
        Rounding granularity.
    modules : tuple of ModuleBytes
        Every module holding bytes, largest first; their ``total_bytes`` add up to
        ``total_bytes``.
    """

    step: int
    total_bytes: int
    alignment_bytes: int
    modules: tuple[ModuleBytes, ...]

    def own_bytes(self) -> dict[str, int]:
        """Full module path -> its own bytes (adds up to ``total_bytes``)."""
        return {m.module: m.total_bytes for m in self.modules}

    def kind_bytes(self) -> dict[str, dict[str, int]]:
        """Full module path -> kind -> bytes."""
        return {m.module: dict(m.bytes_by_kind) for m in self.modules}

    def top_level_bytes(self) -> dict[str, int]:
        """First path component -> bytes of everything in it (adds up to the total)."""
        return depth_bytes(self.own_bytes(), 1)


def subtree_bytes(own: Mapping[str, int]) -> dict[str, int]:
    """Every module and each of its ancestors -> bytes of its whole subtree.

    Examples
    --------
    >>> subtree_bytes({"h.0.attn": 5, "h.0": 1, "wte": 2, "": 3})
    {'h': 6, 'h.0': 6, 'h.0.attn': 5, 'wte': 2, '': 3}
    """
    out: dict[str, int] = {}
    for path, b in own.items():
        for a in module_ancestors(path) or [""]:
            out[a] = out.get(a, 0) + b
    return out


def depth_bytes(own: Mapping[str, int], depth: int) -> dict[str, int]:
    """Bytes grouped by the first ``depth`` components of each path (adds up to the total).

    Examples
    --------
    >>> depth_bytes({"h.0.attn": 5, "h.1.mlp": 1, "wte": 2, "": 3}, 2)
    {'h.0': 5, 'h.1': 1, 'wte': 2, '': 3}
    """
    out: dict[str, int] = {}
    for path, b in own.items():
        key = ".".join(path.split(".")[:depth]) if path else ""
        out[key] = out.get(key, 0) + b
    return out


def repeated_blocks(graph: Graph) -> tuple[str, ...]:
    """The model's repeated blocks: sibling modules ``<prefix>.0``, ``<prefix>.1``, ...

    Among every module whose children are numbered (an ``nn.ModuleList`` or
    ``nn.Sequential``), the family of at least two blocks holding the most forward ops wins
    (GPT-2's ``h.0`` ... ``h.11``, ViT's ``encoder.layers.0`` ...); ``()`` when there is
    none.  Blocks are returned in numeric order.

    Examples
    --------
    >>> from roam_core.model.graph import Op, Phase, Tensor, TensorKind
    >>> ops = [Op(f"o{i}", "aten.relu.default", Phase.FORWARD, (), (f"t{i}",), module=m)
    ...        for i, m in enumerate(["h.0.attn", "h.1.attn", "h.10.mlp", "head.0", "h.2"])]
    >>> g = Graph.build(ops, [Tensor(f"t{i}", 4, "float32", (1,), TensorKind.ACTIVATION,
    ...                              f"o{i}") for i in range(5)])
    >>> repeated_blocks(g)
    ('h.0', 'h.1', 'h.2', 'h.10')
    """
    fwd: dict[str, dict[int, int]] = {}  # prefix -> block number -> forward ops inside
    for op in graph.ops:
        if op.phase is not Phase.FORWARD or not op.module:
            continue
        parts = op.module.split(".")
        for i in range(1, len(parts)):
            if parts[i].isdigit():
                fam = fwd.setdefault(".".join(parts[:i]), {})
                fam[int(parts[i])] = fam.get(int(parts[i]), 0) + 1
    families = [(sum(f.values()), -prefix.count("."), prefix) for prefix, f in fwd.items()
                if len(f) >= 2]
    if not families:
        return ()
    _, _, best = max(families)
    return tuple(f"{best}.{i}" for i in sorted(fwd[best]))


def bytes_live_at_step_by_module(
    graph: Graph, order: Sequence[OpId], step: int, *,
    alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES,
) -> PeakAttribution:
    """The storages live while ``step`` of ``order`` runs (resident ones too), by module.

    Raises
    ------
    GraphError
        If ``order`` is not a permutation of the graph's ops.
    """
    lts = lifetimes(graph, order)
    live = [t for t in graph.tensors.values()
            if t.producer is None or (lts[t.id].start <= step < lts[t.id].end)]
    return _attribute(graph, live, step, alignment_bytes)


def bytes_at_peak_by_module(
    graph: Graph, order: Sequence[OpId] | None = None, *,
    alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES,
) -> PeakAttribution:
    """The bytes live at the peak of ``order`` (program order by default), by module.

    The peak step is :func:`~roam_core.oracle.simulate.simulate`'s (the first step where the
    peak is reached) and the modules' bytes add up to its ``peak_bytes``.

    Examples
    --------
    >>> from roam_core.model.samples import tiny_train_step
    >>> g = tiny_train_step()
    >>> a = bytes_at_peak_by_module(g)
    >>> sum(m.total_bytes for m in a.modules) == simulate(g).peak_bytes == a.total_bytes
    True
    """
    if order is None:
        order = graph.op_ids
    prof = simulate(graph, order, alignment_bytes=alignment_bytes)
    if prof.peak_step < 0:
        return _attribute(graph, [t for t in graph.tensors.values() if t.producer is None],
                          -1, alignment_bytes)
    out = bytes_live_at_step_by_module(graph, order, prof.peak_step,
                                       alignment_bytes=alignment_bytes)
    assert out.total_bytes == prof.peak_bytes, (out.total_bytes, prof.peak_bytes)
    return out


def module_bytes_per_step(
    graph: Graph, order: Sequence[OpId], module: str, *,
    alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES,
) -> tuple[int, ...]:
    """Bytes of the storages of ``module`` (and its submodules) live at each step of ``order``.

    Resident storages of the module count at every step; the curve is the module's part of
    :func:`~roam_core.oracle.simulate.simulate`'s total at each step.

    Examples
    --------
    >>> from roam_core.model.samples import tiny_train_step
    >>> g = tiny_train_step()
    >>> module_bytes_per_step(g, g.op_ids, "") == simulate(g).total_bytes()
    True
    """
    lts = lifetimes(graph, order)
    mine = [t for t in graph.tensors.values() if in_module(tensor_module(graph, t), module)]
    resident = sum(round_size(t.size_bytes, alignment_bytes) for t in mine
                   if t.producer is None)
    prof = simulate(graph, order, alignment_bytes=alignment_bytes,
                    lifetimes_override={t.id: lts[t.id] for t in mine if t.producer is not None})
    return tuple(b + resident for b in prof.live_bytes)


def kind_bytes_per_step(
    graph: Graph, order: Sequence[OpId], kind: TensorKind, *,
    alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES,
) -> tuple[int, ...]:
    """Bytes of the storages of ``kind`` live at each step of ``order`` (resident ones at
    every step): e.g. the ``communication`` buffers of a data-parallel rank's step.

    Examples
    --------
    >>> from roam_core.model.samples import tiny_train_step
    >>> g = tiny_train_step()
    >>> max(kind_bytes_per_step(g, g.op_ids, TensorKind.GRADIENT)) > 0
    True
    """
    lts = lifetimes(graph, order)
    mine = [t for t in graph.tensors.values() if t.kind is kind]
    resident = sum(round_size(t.size_bytes, alignment_bytes) for t in mine
                   if t.producer is None)
    prof = simulate(graph, order, alignment_bytes=alignment_bytes,
                    lifetimes_override={t.id: lts[t.id] for t in mine if t.producer is not None})
    return tuple(b + resident for b in prof.live_bytes)


def _attribute(graph: Graph, live: Sequence[Tensor], step: int,
               alignment_bytes: int) -> PeakAttribution:
    per: dict[str, list[Tensor]] = {}
    for t in live:
        per.setdefault(tensor_module(graph, t), []).append(t)
    mods = []
    for path, ts in per.items():
        sizes = {t.id: round_size(t.size_bytes, alignment_bytes) for t in ts}
        kinds: dict[str, int] = {}
        for t in ts:
            kinds[t.kind.value] = kinds.get(t.kind.value, 0) + sizes[t.id]
        total = sum(sizes.values())
        if total == 0:
            continue
        ranked = tuple(sorted((t.id for t in ts if sizes[t.id]), key=lambda i: -sizes[i]))
        mods.append(ModuleBytes(path, total, dict(sorted(kinds.items())), ranked))
    mods.sort(key=lambda m: (-m.total_bytes, m.module))
    return PeakAttribution(step, sum(m.total_bytes for m in mods), alignment_bytes,
                           tuple(mods))
