"""A budget plan as a selective activation-checkpointing policy for stock PyTorch.

A plan with recomputation says which forward storages to drop and re-run in the backward.
``torch.utils.checkpoint.checkpoint(..., use_reentrant=False, context_fn=...)`` with a
selective policy (``create_selective_checkpoint_contexts``) says, per module call, which ATen
ops to save (``MUST_SAVE``: their outputs are cached for the backward) and which to re-run
(``PREFER_RECOMPUTE``).  :class:`CheckpointPolicyExport` is the second derived from the first
(:func:`roam_core.recompute.checkpoint_export.export_checkpoint_policy`): for every module to
wrap, one decision per op of one call, matched by ATen overload and occurrence (the
``n``-th call of that overload within the module call, the count torch's own policy cache
keeps), plus what the policy cannot express and what that costs in bytes.

``roam export-policy`` writes it as JSON (:mod:`roam_core.formats.policy_io`);
:func:`roam_core.runtime.checkpoint_policy.apply_checkpoint_plan` wraps a model with it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from roam_core.model.graph import OpId, TensorId

__all__ = ["CheckpointPolicyExport", "Decision", "ExtraSaved", "ModulePolicy", "OpPolicy",
           "PolicyCursor", "UnexpressedDrop", "op_family"]

#: Overloads another tracing of the same code spells differently (torch.compile's view of a
#: matmul's reshape).
_SAME_AS = {"_unsafe_view": "view"}
#: CPU dropout as eager runs it, which torch.compile sees as one ``native_dropout``.
_CPU_DROPOUT = ("aten.empty_like", "aten.bernoulli", "aten.div", "aten.mul")
_FUSED_DROPOUT = "aten.native_dropout"
_NO_OP = OpId("")


class Decision(enum.StrEnum):
    """What the policy returns for one op: torch's ``MUST_SAVE`` or ``PREFER_RECOMPUTE``."""

    SAVE = "save"
    RECOMPUTE = "recompute"


@dataclass(frozen=True, slots=True)
class OpPolicy:
    """The decision for one op of a module call.

    Parameters
    ----------
    target : str
        The ATen overload as ``str(op)`` spells it (``"aten.addmm.default"``).
    occurrence : int
        0 for the first call of ``target`` within one call of the module, 1 for the next...
        (``aten.detach.default`` is not counted: torch's policy never sees it).
    decision : Decision
        Save its outputs for the backward, or re-run it there.
    op_id : OpId
        The traced op it was derived from (in the module's first call), for people.
    """

    target: str
    occurrence: int
    decision: Decision
    op_id: OpId = _NO_OP


@dataclass(frozen=True, slots=True)
class ModulePolicy:
    """One module to wrap in ``torch.utils.checkpoint`` and its selective policy.

    Parameters
    ----------
    module : str
        Its qualified path (``"h.3"``; a key of ``model.named_modules()``).
    calls : int
        How many times the traced step called it (each call is one checkpointed region).
    ops : tuple of OpPolicy
        Every op of one call, in forward order.
    """

    module: str
    calls: int
    ops: tuple[OpPolicy, ...]

    @property
    def saved(self) -> tuple[OpPolicy, ...]:
        """The ops whose outputs the policy keeps."""
        return tuple(o for o in self.ops if o.decision is Decision.SAVE)


@dataclass(frozen=True, slots=True)
class UnexpressedDrop:
    """A storage the plan drops that the exported policy keeps for the backward.

    Parameters
    ----------
    storage : TensorId
        The storage.
    size_bytes : int
        Its bytes: what keeping it costs while it is live.
    reason : str
        Why no checkpointed module can drop it, in words.
    """

    storage: TensorId
    size_bytes: int
    reason: str


@dataclass(frozen=True, slots=True)
class ExtraSaved:
    """A storage the exported policy holds for the backward that the plan does not.

    Parameters
    ----------
    storage : TensorId
        The storage.
    size_bytes : int
        Its bytes.
    reason : str
        Why torch holds it (a checkpointed region's input, an op torch must not re-run).
    """

    storage: TensorId
    size_bytes: int
    reason: str


@dataclass(frozen=True, slots=True)
class CheckpointPolicyExport:
    """A plan's recomputation as per-module selective checkpointing decisions.

    Parameters
    ----------
    graph_fingerprint : str
        ``Graph.fingerprint()`` of the graph the plan was made for.
    graph_name : str
        For people.
    plan_method : str
        The plan's ``method``.
    modules : tuple of ModulePolicy
        The modules to wrap, in forward order (none is inside another).
    unexpressed : tuple of UnexpressedDrop
        The plan's drops the policy cannot make.
    extra_saved : tuple of ExtraSaved
        What the policy holds that the plan does not.
    dropped_bytes : int
        Bytes of every storage the plan drops.
    planned_peak_bytes : int
        The plan's peak (resident bytes included).
    recompute_flops : int
        FLOPs torch's re-runs add to a step (each wrapped call re-run up to the last op
        whose result the backward reads); the plan's own figure is ``Plan.extra_flops``.
    """

    graph_fingerprint: str
    graph_name: str
    plan_method: str
    modules: tuple[ModulePolicy, ...]
    unexpressed: tuple[UnexpressedDrop, ...] = ()
    extra_saved: tuple[ExtraSaved, ...] = ()
    dropped_bytes: int = 0
    planned_peak_bytes: int = 0
    recompute_flops: int = 0

    @property
    def unexpressed_bytes(self) -> int:
        """Bytes of the plan's drops that the policy keeps."""
        return sum(u.size_bytes for u in self.unexpressed)

    @property
    def extra_saved_bytes(self) -> int:
        """Bytes the policy holds for the backward that the plan does not."""
        return sum(e.size_bytes for e in self.extra_saved)

    @property
    def expressed_bytes(self) -> int:
        """Bytes of the plan's drops that the policy makes too."""
        return self.dropped_bytes - self.unexpressed_bytes

    def summary(self) -> str:
        """One line for people: modules wrapped, drops expressed, what is not."""
        mib = 2.0**20
        return (f"{len(self.modules)} module(s) checkpointed; {self.expressed_bytes / mib:.2f}"
                f" of {self.dropped_bytes / mib:.2f} MiB of drops expressed; "
                f"{len(self.unexpressed)} drop(s) not expressible "
                f"({self.unexpressed_bytes / mib:.2f} MiB kept); "
                f"{self.extra_saved_bytes / mib:.2f} MiB held that the plan frees")


def op_family(target: str) -> str:
    """The op without overload, in-place mark or spelling variant, for matching streams.

    Examples
    --------
    >>> op_family("aten.relu_.default"), op_family("aten._unsafe_view.default")
    ('aten.relu', 'aten.view')
    """
    ns, _, rest = target.partition(".")
    name = rest.partition(".")[0]
    if name.endswith("_") and not name.endswith("__"):
        name = name[:-1]
    return f"{ns}.{_SAME_AS.get(name, name)}"


class PolicyCursor:
    """Follows one call of a module through its :class:`ModulePolicy`, op by op.

    In eager the call runs exactly the traced ops and each op gets its own decision.  Under
    ``torch.compile`` the same call is seen after functionalization and with a few ops
    spelled otherwise (:func:`op_family`; CPU dropout's four ops as ``native_dropout``);
    an op absent from the policy is answered ``None`` and ops the call skipped are
    collected in ``skipped``, so that the caller can say so.

    Examples
    --------
    >>> mp = ModulePolicy("m", 1, (OpPolicy("aten.mm.default", 0, Decision.SAVE),
    ...                            OpPolicy("aten.relu.default", 0, Decision.RECOMPUTE)))
    >>> c = PolicyCursor(mp)
    >>> c.next("aten.mm.default"), c.next("aten.relu_.default"), c.next("aten.mm.default")
    (<Decision.SAVE: 'save'>, <Decision.RECOMPUTE: 'recompute'>, None)
    """

    #: How far ahead an op is looked for before it counts as unknown.
    LOOKAHEAD = 8

    def __init__(self, policy: ModulePolicy) -> None:
        self.ops = policy.ops
        self.families = [op_family(o.target) for o in policy.ops]
        self.pos = 0
        self.skipped: list[OpPolicy] = []

    def next(self, target: str, *, exact: bool = False) -> Decision | None:
        """The decision for the next op the call runs (``None``: not in the policy).

        ``exact``: only the policy's next op may match (no looking ahead).
        """
        fam, i, fams = op_family(target), self.pos, self.families
        if i < len(fams) and fams[i] == fam:
            self.pos = i + 1
            return self.ops[i].decision
        if exact:
            return None
        if fam == _FUSED_DROPOUT and tuple(fams[i:i + 4]) == _CPU_DROPOUT:
            self.pos = i + 4
            return Decision.RECOMPUTE  # a random op: never cached
        for j in range(i + 1, min(len(fams), i + 1 + self.LOOKAHEAD)):
            if fams[j] == fam:
                self.skipped.extend(self.ops[i:j])
                self.pos = j + 1
                return self.ops[j].decision
        return None

    @property
    def left(self) -> tuple[OpPolicy, ...]:
        """The policy's ops the call has not run (yet)."""
        return self.ops[self.pos:]
