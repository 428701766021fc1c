"""Parameters and buffers by tensor identity: one definition for the tracer and the runtime.

A model may hold the same tensor under several names:

* weights tied after construction (``head.weight = emb.weight``, as Hugging Face does);
* the same module used twice (``self.blocks = [blk, blk]``);
* one parameter registered on several modules.

The tracer and the runtime must agree on the distinct tensors and their order, or the traced
step's placeholders and the real model's tensors do not line up.  Both use
:func:`unique_named_parameters` / :func:`unique_named_buffers`: the semantics of
``named_parameters(remove_duplicate=True)`` (first name wins, first-seen order), by identity.

Materialising a model built on the meta device (``Module.to_empty``) replaces every
parameter module by module, so a tensor shared by two modules becomes two tensors: the ties
are lost.  :func:`tie_groups` records them before, :func:`retie` restores them after.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

import torch
from torch import nn

__all__ = ["TieGroup", "retie", "tie_groups", "unique_named_buffers", "unique_named_parameters"]


_T = TypeVar("_T", bound=torch.Tensor)


def _unique(named: Iterable[tuple[str, _T]]) -> list[tuple[str, _T]]:
    seen: dict[int, tuple[str, _T]] = {}
    for name, t in named:
        seen.setdefault(id(t), (name, t))
    return list(seen.values())


def unique_named_parameters(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """Distinct parameters with their first qualified name, in first-seen order.

    Examples
    --------
    >>> emb, head = nn.Embedding(4, 2), nn.Linear(2, 4, bias=False)
    >>> head.weight = emb.weight
    >>> [n for n, _ in unique_named_parameters(nn.ModuleDict({"emb": emb, "head": head}))]
    ['emb.weight']
    """
    return _unique(model.named_parameters(remove_duplicate=False))


def unique_named_buffers(model: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """Distinct buffers with their first qualified name, in first-seen order."""
    return _unique(model.named_buffers(remove_duplicate=False))


@dataclass(frozen=True, slots=True)
class TieGroup:
    """Qualified names that hold one tensor: ``names[0]`` is the one kept.

    Parameters
    ----------
    names : tuple of str
        Every name under which the tensor is registered (at least two).
    is_parameter : bool
        A parameter (``True``) or a buffer.
    """

    names: tuple[str, ...]
    is_parameter: bool


def tie_groups(model: nn.Module) -> tuple[TieGroup, ...]:
    """The tensors registered under more than one name, as groups of names.

    Examples
    --------
    >>> m = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    >>> m[1].weight = m[0].weight
    >>> tie_groups(m)
    (TieGroup(names=('0.weight', '1.weight'), is_parameter=True),)
    """
    out: list[TieGroup] = []
    for named, is_param in ((model.named_parameters(remove_duplicate=False), True),
                            (model.named_buffers(remove_duplicate=False), False)):
        by_id: dict[int, list[str]] = {}
        for name, t in named:
            names = by_id.setdefault(id(t), [])
            if name not in names:
                names.append(name)
        out.extend(TieGroup(tuple(n), is_param) for n in by_id.values() if len(n) > 1)
    return tuple(out)


def _owner(model: nn.Module, name: str) -> tuple[nn.Module, str]:
    path, _, leaf = name.rpartition(".")
    return (model.get_submodule(path) if path else model), leaf


def retie(model: nn.Module, groups: Iterable[TieGroup]) -> nn.Module:
    """Make every name of each group hold the tensor of its first name again (in place).

    Parameters
    ----------
    model : nn.Module
        A model whose ties may have been broken (e.g. by ``to_empty``).
    groups : iterable of TieGroup
        From :func:`tie_groups` on the model before it was changed.

    Returns
    -------
    nn.Module
        ``model`` itself.
    """
    for g in groups:
        mod, leaf = _owner(model, g.names[0])
        keep = (mod._parameters if g.is_parameter else mod._buffers)[leaf]
        for name in g.names[1:]:
            other, key = _owner(model, name)
            table = other._parameters if g.is_parameter else other._buffers
            table[key] = keep  # type: ignore[assignment]  # a Parameter if from _parameters
    return model
