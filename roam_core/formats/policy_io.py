"""Checkpointing policy files: a budget plan's decisions for other tools (``roam
export-policy``).

Format (``schema_version`` 1)::

    {
      "format": "roam-checkpoint-policy", "schema_version": 1,
      "graph_fingerprint": "3fa4...", "graph_name": "gpt2-b2-t128-steady",
      "plan_method": "roam", "planned_peak_bytes": 2121728,
      "modules": {"h.0": [["aten.native_layer_norm.default", 0, "save"],
                          ["aten.addmm.default", 0, "recompute"], ...], ...},
      "module_calls": {"h.0": 1, ...},
      "dropped_bytes": 196608, "expressed_bytes": 180224, "recompute_flops": 9437184,
      "unexpressed_bytes": 16384,
      "unexpressed": [{"storage": "add_2", "size_bytes": 16384, "reason": "..."}],
      "extra_saved_bytes": 0, "extra_saved": [{"storage": ..., "size_bytes": ...,
                                               "reason": ...}],
      "summary": "2 module(s) checkpointed; ..."
    }

``modules`` maps a module path (a key of ``model.named_modules()``) to one entry per op of
one call of it, in forward order: the ATen overload as ``str(op)`` spells it, its occurrence
(0 for the first call of that overload within the module call; ``aten.detach`` is not
counted), and ``"save"`` (torch's ``CheckpointPolicy.MUST_SAVE``) or ``"recompute"``
(``PREFER_RECOMPUTE``).  Wrap each module in ``torch.utils.checkpoint.checkpoint(...,
use_reentrant=False, context_fn=...)`` with a policy returning those decisions
(:func:`roam_core.runtime.checkpoint_policy.apply_checkpoint_plan` does).  Files are written
atomically (a temporary file renamed over the target).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from typing import Any

from roam_core.base.errors import PlanFormatError
from roam_core.model.checkpoint_policy import (
    CheckpointPolicyExport,
    Decision,
    ExtraSaved,
    ModulePolicy,
    OpPolicy,
    UnexpressedDrop,
)

__all__ = ["POLICY_FORMAT", "POLICY_SCHEMA_VERSION", "dumps_policy", "load_policy",
           "loads_policy", "policy_from_dict", "policy_to_dict", "save_policy"]

POLICY_FORMAT = "roam-checkpoint-policy"
POLICY_SCHEMA_VERSION = 1


def policy_to_dict(export: CheckpointPolicyExport) -> dict[str, Any]:
    """The JSON object of a policy (see the module docstring)."""
    return {
        "format": POLICY_FORMAT, "schema_version": POLICY_SCHEMA_VERSION,
        "graph_fingerprint": export.graph_fingerprint, "graph_name": export.graph_name,
        "plan_method": export.plan_method, "planned_peak_bytes": export.planned_peak_bytes,
        "modules": {m.module: [[o.target, o.occurrence, o.decision.value] for o in m.ops]
                    for m in export.modules},
        "module_calls": {m.module: m.calls for m in export.modules},
        "dropped_bytes": export.dropped_bytes, "expressed_bytes": export.expressed_bytes,
        "recompute_flops": export.recompute_flops,
        "unexpressed_bytes": export.unexpressed_bytes,
        "unexpressed": [{"storage": u.storage, "size_bytes": u.size_bytes,
                         "reason": u.reason} for u in export.unexpressed],
        "extra_saved_bytes": export.extra_saved_bytes,
        "extra_saved": [{"storage": e.storage, "size_bytes": e.size_bytes,
                         "reason": e.reason} for e in export.extra_saved],
        "summary": export.summary(),
    }


def _field(d: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in d:
        raise PlanFormatError(f"policy file: field {where + key!r} is missing")
    v = d[key]
    if not isinstance(v, kind) or (isinstance(v, bool) and kind is int):
        raise PlanFormatError(f"policy file: field {where + key!r} is not a valid "
                              f"{getattr(kind, '__name__', 'value')}: {v!r}")
    return v


def _module(path: str, entries: Any, calls: Any) -> ModulePolicy:
    where = f"modules[{path!r}]"
    if not isinstance(entries, list):
        raise PlanFormatError(f"policy file: {where} is not a list")
    ops = []
    for i, e in enumerate(entries):
        if (not isinstance(e, list) or len(e) != 3 or not isinstance(e[0], str)
                or not isinstance(e[1], int) or isinstance(e[1], bool) or e[1] < 0
                or e[2] not in {d.value for d in Decision}):
            raise PlanFormatError(f"policy file: {where}[{i}] is not [op, occurrence, "
                                  f"'save' | 'recompute']: {e!r}")
        ops.append(OpPolicy(e[0], e[1], Decision(e[2])))
    if not isinstance(calls, int) or isinstance(calls, bool) or calls < 1:
        raise PlanFormatError(f"policy file: module_calls[{path!r}] is not a positive "
                              f"count: {calls!r}")
    return ModulePolicy(path, calls, tuple(ops))


def _bytes_list(items: Any, key: str, cls: type) -> tuple[Any, ...]:
    if not isinstance(items, list):
        raise PlanFormatError(f"policy file: {key!r} is not a list")
    out = []
    for i, u in enumerate(items):
        where = f"{key}[{i}]."
        if not isinstance(u, dict):
            raise PlanFormatError(f"policy file: {key}[{i}] is not an object")
        out.append(cls(_field(u, "storage", str, where), _field(u, "size_bytes", int, where),
                       _field(u, "reason", str, where)))
    return tuple(out)


def policy_from_dict(d: Any) -> CheckpointPolicyExport:
    """Read a policy object; :class:`PlanFormatError` names the first bad field."""
    if not isinstance(d, dict) or d.get("format") != POLICY_FORMAT:
        raise PlanFormatError(f"not a roam checkpoint policy (format must be "
                              f"{POLICY_FORMAT!r})")
    if d.get("schema_version") != POLICY_SCHEMA_VERSION:
        raise PlanFormatError(f"policy file: schema_version {d.get('schema_version')!r} is "
                              f"not {POLICY_SCHEMA_VERSION}")
    modules = _field(d, "modules", dict, "")
    calls = _field(d, "module_calls", dict, "")
    return CheckpointPolicyExport(
        graph_fingerprint=_field(d, "graph_fingerprint", str, ""),
        graph_name=_field(d, "graph_name", str, ""),
        plan_method=_field(d, "plan_method", str, ""),
        modules=tuple(_module(p, e, calls.get(p)) for p, e in modules.items()),
        unexpressed=_bytes_list(d.get("unexpressed", []), "unexpressed", UnexpressedDrop),
        extra_saved=_bytes_list(d.get("extra_saved", []), "extra_saved", ExtraSaved),
        dropped_bytes=_field(d, "dropped_bytes", int, ""),
        planned_peak_bytes=_field(d, "planned_peak_bytes", int, ""),
        recompute_flops=_field(d, "recompute_flops", int, ""))


def dumps_policy(export: CheckpointPolicyExport) -> str:
    """The policy as JSON text (one line per op decision, ``modules`` last)."""
    d = policy_to_dict(export)
    modules = d.pop("modules")
    entries = [f"  {json.dumps(path)}: [" + ",".join(f"\n   {json.dumps(o)}" for o in ops)
               + ("\n  ]" if ops else "]") for path, ops in modules.items()]
    body = ",\n".join(entries)
    return (json.dumps(d, indent=1)[:-2] + ',\n "modules": {'
            + (f"\n{body}\n }}" if entries else "}") + "\n}")


def loads_policy(text: str) -> CheckpointPolicyExport:
    """Parse JSON text written by :func:`dumps_policy`."""
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise PlanFormatError(f"policy file is not JSON: {e}") from e
    return policy_from_dict(d)


def save_policy(export: CheckpointPolicyExport, path: str | os.PathLike[str]) -> None:
    """Write ``export`` to ``path`` atomically: a reader sees the old file or the new one,
    never half of one (a temporary file in the same folder, renamed over ``path``)."""
    target = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(target))
    fd, tmp = tempfile.mkstemp(prefix=".policy-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(dumps_policy(export))
            f.write("\n")
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would outlive the rename
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_policy(path: str | os.PathLike[str]) -> CheckpointPolicyExport:
    """Read a policy file (:class:`PlanFormatError` when it is not one)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise PlanFormatError(f"cannot read policy file {os.fspath(path)!r}: "
                              f"{e.strerror}") from e
    return loads_policy(text)
