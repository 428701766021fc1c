"""What to type to use a plan: the training code and the command lines that remake it.

Pure: from the graph's recorded origin (:attr:`roam_core.model.graph.Graph.origin`) and the
plan's recorded settings (:attr:`roam_core.model.plan.Plan.settings`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["UsePlan", "cli_lines", "python_code", "use_plan"]

#: PlannerConfig defaults the CLI also uses: a setting equal to one is left off the line.
_CLI_DEFAULTS: Mapping[str, Any] = {"node_limit": 60, "seed": 0}


@dataclass(frozen=True, slots=True)
class UsePlan:
    """The card's three parts: Python code, shell lines, and what they assume."""

    python: str
    cli: str
    notes: tuple[str, ...]


def _file_stem(graph_name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in graph_name) or "graph"


def _zoo(origin: Mapping[str, Any]) -> bool:
    return origin.get("source") == "zoo" and bool(origin.get("model"))


def cli_lines(graph_name: str, origin: Mapping[str, Any], method: str,
              settings: Mapping[str, Any]) -> str:
    """``roam trace`` (zoo graphs) and ``roam plan`` lines that make this plan again.

    >>> print(cli_lines("mlp-b8-steady", {"source": "zoo", "model": "mlp", "batch_size": 8,
    ...                 "setting": "steady", "optimizer": "adamw"}, "roam",
    ...                 {"time_limit_s": 2.0, "budget_bytes": None}))
    roam trace mlp -b 8 --setting steady --optimizer adamw -o mlp-b8-steady.json.gz
    roam plan mlp-b8-steady.json.gz -o mlp-b8-steady.plan.json --time-limit 2
    """
    stem = _file_stem(graph_name)
    lines = []
    if _zoo(origin):
        trace = [f"roam trace {origin['model']}", f"-b {int(origin.get('batch_size') or 1)}"]
        if origin.get("seq_len"):
            trace.append(f"-t {int(origin['seq_len'])}")
        trace.append(f"--setting {origin.get('setting') or 'steady'}")
        for key in ("optimizer", "attention"):
            if origin.get(key):
                trace.append(f"--{key} {origin[key]}")
        trace += _precision_flags(origin)
        lines.append(" ".join([*trace, f"-o {stem}.json.gz"]))
    plan = [f"roam plan {stem}.json.gz", f"-o {stem}.plan.json"]
    if method != "roam":
        plan.append(f"--method {method}")
    if settings.get("time_limit_s"):
        plan.append(f"--time-limit {float(settings['time_limit_s']):g}")
    for key, flag in (("node_limit", "--node-limit"), ("seed", "--seed")):
        if key in settings and settings[key] != _CLI_DEFAULTS[key]:
            plan.append(f"{flag} {settings[key]}")
    budget = settings.get("budget_bytes")
    if budget is not None:
        plan.append(f"--budget {budget}")
    lines.append(" ".join(plan))
    return "\n".join(lines)


def _precision_flags(origin: Mapping[str, Any]) -> list[str]:
    """``--precision`` (unless fp32) and ``--merge-casts`` of the trace the graph records.

    >>> _precision_flags({"precision": "bf16-mixed", "merge_casts": True})
    ['--precision bf16-mixed', '--merge-casts']
    >>> _precision_flags({"precision": "fp32"})
    []
    """
    prec = origin.get("precision") or "fp32"
    return ([f"--precision {prec}"] if prec != "fp32" else []) + (
        ["--merge-casts"] if origin.get("merge_casts") else [])


def _step_kwargs(origin: Mapping[str, Any]) -> str:
    """``PlannedStep``'s precision arguments for the step the graph records (the plan is
    refused for a step traced otherwise)."""
    prec = origin.get("precision") or "fp32"
    return ((f", precision={prec!r}" if prec != "fp32" else "")
            + (", merge_casts=True" if origin.get("merge_casts") else ""))


def python_code(graph_name: str, origin: Mapping[str, Any], recompute: bool) -> str:
    """The training loop with :class:`roam_core.PlannedStep` (and, for a plan that
    re-runs ops, :func:`roam_core.apply_checkpoint_plan` for a loop of one's own).

    >>> "build_zoo_step('mlp', 8, None, 'steady', 'adamw', 'cpu')" in python_code(
    ...     "mlp-b8-steady", {"source": "zoo", "model": "mlp", "batch_size": 8,
    ...                       "setting": "steady", "optimizer": "adamw"}, False)
    True
    """
    stem = _file_stem(graph_name)
    head = ["import roam_core as rc"]
    if _zoo(origin):
        head.append("from roam_core.zoo import build_zoo_step")
    body = ["", f'plan = rc.load_plan("{stem}.plan.json")  # Export / import > Plan JSON']
    if _zoo(origin):
        args = (origin["model"], int(origin.get("batch_size") or 1), origin.get("seq_len"),
                origin.get("setting") or "steady", origin.get("optimizer"), "cpu")
        body += [f"model, inputs, loss_fn, make_optimizer = build_zoo_step{args!r}",
                 "step = rc.PlannedStep(model, plan, loss_fn, make_optimizer, "
                 f"example_inputs=inputs{_step_kwargs(origin)})",
                 "for batch in [inputs]:  # your data loader: batches shaped like inputs",
                 "    loss = step(*batch)  # forward, backward and update in the plan's order"]
    else:
        body += ["# model, loss_fn and optimizer: the ones the graph was traced with",
                 "step = rc.PlannedStep(model, plan, loss_fn, optimizer, "
                 f"example_inputs=inputs{_step_kwargs(origin)})",
                 "for batch in loader:",
                 "    loss = step(*batch)  # forward, backward and update in the plan's order"]
    if recompute:
        body += ["",
                 "# or keep your own loop (torch.compile, FSDP): stock checkpointing that",
                 "# re-runs what the plan re-runs (instead of PlannedStep)",
                 f'# applied = rc.apply_checkpoint_plan(model, plan, '
                 f'rc.load_graph("{stem}.json.gz"))']
    return "\n".join([*head, *body])


def use_plan(graph_name: str, origin: Mapping[str, Any], method: str,
             settings: Mapping[str, Any], recompute: bool) -> UsePlan:
    """The card for one plan (see :func:`python_code` and :func:`cli_lines`)."""
    notes = []
    if not _zoo(origin):
        notes.append(f"{_file_stem(graph_name)}.json.gz is the graph file you loaded; the "
                     "code needs the model, loss and optimizer it was traced with.")
    if (origin.get("setting") or "steady") != "steady":
        notes.append("This graph is traced in the ROAM paper's setting (the optimizer's "
                     "first step); PlannedStep trains with steady-setting plans: trace with "
                     "--setting steady and plan that graph to train.")
    if settings.get("time_limit_s"):
        notes.append("The planner stops at its time limit: on another machine or load the "
                     "same command may find a plan of a slightly different peak.")
    return UsePlan(python_code(graph_name, origin, recompute),
                   cli_lines(graph_name, origin, method, settings), tuple(notes))
