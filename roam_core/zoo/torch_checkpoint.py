"""torch's own activation checkpointing applied to a zoo model, traced by roam.

The peers that decide per module -- ``torch.utils.checkpoint`` around every block, the
per-operator policies of torch's AutoSAC (:mod:`roam_core.zoo.autosac`, selective
checkpointing through ``create_selective_checkpoint_contexts``), and the "save matmuls"
selective policy of torch's documentation around every block (:data:`SAVE_MATMUL_OPS`) --
run *in the model*, so
they are measured on the model wrapped as torch would run it and traced by roam's tracer:
the traced graph holds torch's own re-runs in the backward, and roam's simulator, order and
layout stages and cost model score it like any other graph.

roam's tracer records through a proxy mode, which selective checkpointing takes for
``torch.compile`` (it would then save everything and leave the choice to the partitioner);
tracing inside ``torch.compiler._non_strict_tracing_context`` gives the eager semantics.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
)

from roam_core.base.errors import TraceError
from roam_core.model.graph import Graph
from roam_core.trace.blocks import block_modules
from roam_core.trace.tracer import trace_fx
from roam_core.zoo.steps import ZooStep, build_zoo_step

__all__ = ["SAVE_MATMUL_OPS", "OpPolicy", "block_modules", "checkpoint_modules",
           "save_matmul_ops", "trace_checkpointed", "trace_wrapped", "zoo_step_of"]

#: A per-operator decision list for one module's forward: 1 saves the op's output, 0
#: recomputes it (AutoSAC's ``get_optimal_checkpointing_policy_per_module`` order).
OpPolicy = Sequence[int]

#: The ATen ops the "save matmuls" selective policy saves: matmul and attention-kernel
#: outputs (the ``create_selective_checkpoint_contexts`` example of torch's documentation,
#: and torchtitan's op-level policy without its every-other-matmul rule); every other op in
#: a checkpointed block is recomputed.  ``aten.linear`` and ``aten.matmul`` are not listed:
#: they decompose to these before the policy sees them.
SAVE_MATMUL_OPS: tuple[str, ...] = (
    "mm.default", "addmm.default", "bmm.default",
    "_scaled_dot_product_flash_attention.default",
    "_scaled_dot_product_flash_attention_for_cpu.default",
    "_scaled_dot_product_efficient_attention.default",
    "_scaled_dot_product_cudnn_attention.default")


def save_matmul_ops() -> list[Any]:
    """:data:`SAVE_MATMUL_OPS` as ATen overloads (those this torch has)."""
    out = []
    for name in SAVE_MATMUL_OPS:
        packet, overload = name.rsplit(".", 1)
        op = getattr(getattr(torch.ops.aten, packet, None), overload, None)
        if op is not None:
            out.append(op)
    return out


def _policy(decisions: OpPolicy, skip: frozenset[Any]) -> Callable[..., CheckpointPolicy]:
    """A selective-checkpoint policy reading ``decisions`` op by op (ops in ``skip`` are not
    counted: AutoSAC's statistics leave them out)."""
    seen = [0]

    def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        if func in skip:
            return CheckpointPolicy.PREFER_RECOMPUTE
        k = seen[0]
        seen[0] += 1
        if k >= len(decisions):
            raise TraceError(f"selective checkpoint: op {k} ({func}) beyond the policy's "
                             f"{len(decisions)} decisions")
        return CheckpointPolicy.MUST_SAVE if decisions[k] else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def _wrap(module: nn.Module, context: Callable[[], Any] | None) -> None:
    fwd = module.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        if context is None:
            return checkpoint(fwd, *args, use_reentrant=False, **kwargs)
        return checkpoint(fwd, *args, use_reentrant=False, context_fn=context, **kwargs)

    module.forward = forward


def zoo_step_of(graph: Graph, device: str = "meta") -> ZooStep:
    """The zoo (or Hugging Face config) step a graph was traced from (its ``origin``), built
    on ``device``.

    Raises
    ------
    TraceError
        The graph is not a zoo trace.
    """
    o = dict(graph.origin or {})
    if o.get("source") == "hf":  # a Hugging Face config's step (``roam trace --hf-config``)
        from roam_core.zoo.hf import hf_step_from_origin

        return hf_step_from_origin(o, device)
    if o.get("source") != "zoo":
        raise TraceError("the graph is not a zoo model's trace: torch's checkpointing needs "
                         "the model")
    return build_zoo_step(o["model"], int(o["batch_size"]), o.get("seq_len"),
                          o.get("setting", "steady"), o.get("optimizer"), device,
                          attention=o.get("attention"))


def checkpoint_modules(model: nn.Module, policies: Mapping[str, OpPolicy | None] | None = None,
                       skip_ops: frozenset[Any] = frozenset(),
                       save_ops: Sequence[Any] = ()) -> list[str]:
    """Wrap modules of ``model`` in ``torch.utils.checkpoint`` in place; returns their paths.

    Parameters
    ----------
    model : nn.Module
        The model.
    policies : Mapping of str to OpPolicy or None, optional
        Module path (``model.named_modules()`` names) -> its selective policy, or ``None``
        for plain ``torch.utils.checkpoint`` (recompute everything inside; with
        ``save_ops``, everything but those ops' outputs).  Default: every block
        (:func:`~roam_core.trace.blocks.block_modules`), each with ``None``.
    skip_ops : frozenset
        Ops a policy does not count (see :func:`_policy`).
    save_ops : Sequence
        ATen overloads whose outputs a module without its own policy saves
        (``create_selective_checkpoint_contexts`` given the list, e.g.
        :func:`save_matmul_ops`); empty: plain checkpointing.

    Raises
    ------
    TraceError
        No blocks, or a module path the model does not have.
    """
    if policies is None:
        blocks = block_modules(model)
        if not blocks:
            raise TraceError("no repeated blocks to checkpoint")
        policies = {n: None for n, _ in blocks}
    mods = dict(model.named_modules())
    for m in mods.values():
        # a Hugging Face decoder's key/value cache is filled in the forward and found full
        # in the recomputation (T5: "a different number of tensors was saved"); HF turns it
        # off too when gradient checkpointing is on
        cfg = getattr(m, "config", None)
        if cfg is not None and getattr(cfg, "use_cache", False) is True:
            cfg.use_cache = False
    for path, pol in policies.items():
        if path not in mods:
            raise TraceError(f"no module {path!r} to checkpoint")
        ctx: Callable[[], Any] | None = None
        if pol is not None:
            ctx = functools.partial(
                lambda p: create_selective_checkpoint_contexts(_policy(p, skip_ops)), pol)
        elif save_ops:
            ctx = functools.partial(create_selective_checkpoint_contexts, list(save_ops))
        _wrap(mods[path], ctx)
    return list(policies)


def trace_wrapped(model: nn.Module, example_inputs: Sequence[Any], loss_fn: Any,
                  optimizer: Any, **kwargs: Any) -> Graph:
    """:func:`~roam_core.trace.tracer.trace_fx` of a model with checkpointed modules, with
    the eager semantics of selective checkpointing (see the module docstring)."""
    with torch.compiler._non_strict_tracing_context():
        return trace_fx(model, list(example_inputs), loss_fn, optimizer, **kwargs).graph


def trace_checkpointed(graph: Graph, *, policies: Mapping[str, OpPolicy | None] | None = None,
                       skip_ops: frozenset[Any] = frozenset(), save_ops: Sequence[Any] = (),
                       name_suffix: str = "ckpt") -> Graph:
    """The zoo (or Hugging Face config) model of ``graph`` with torch's checkpointing applied
    (:func:`checkpoint_modules`), traced by roam.

    Raises
    ------
    TraceError
        Not a zoo or HF trace, no blocks, or a module path the model does not have.
    """
    step = zoo_step_of(graph)
    try:
        checkpoint_modules(step.model, policies, skip_ops, save_ops)
    except TraceError as e:
        raise TraceError(f"{graph.name}: {e}") from None
    origin = {**dict(graph.origin), "checkpointed": name_suffix}
    return trace_wrapped(step.model, step.example_inputs, step.loss_fn, step.optimizer_factory,
                         setting=origin.get("setting", "steady"),
                         name=f"{graph.name}-{name_suffix}", origin=origin,
                         # the peer is the same step: the graph's precision, not fp32
                         precision=str(origin.get("precision", "fp32")))
