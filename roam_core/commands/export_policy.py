"""``roam export-policy GRAPH PLAN -o policy.json``: a budget plan as a selective activation
checkpointing policy for stock PyTorch.

Writes, per module to wrap in ``torch.utils.checkpoint``, the decision for each op of its
call (ATen overload, occurrence, ``save`` or ``recompute``), and the plan's drops that no
checkpoint can express with their bytes (:mod:`roam_core.formats.policy_io`); prints one line.
Which modules have a ``forward`` to wrap is read from the model when the graph's origin can
rebuild it (zoo and Hugging Face graphs, on the meta device: nothing is allocated), else
guessed from the graph (the modules some op runs in directly).
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from roam_core.commands.arg_types import positive_int

__all__ = ["register"]

_logger = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``export-policy`` sub-command."""
    p = subparsers.add_parser(
        "export-policy", help="write a budget plan as a torch.utils.checkpoint policy",
        description="Turn a plan with recomputation into selective activation "
                    "checkpointing decisions: which modules to wrap in "
                    "torch.utils.checkpoint and, per op of their call, save or recompute. "
                    "The file also lists the plan's drops that no checkpoint can express "
                    "and their bytes; roam_core.apply_checkpoint_plan(model, 'policy.json') "
                    "applies it.")
    p.add_argument("graph", help="graph file (.json or .json.gz)")
    p.add_argument("plan", help="plan file for that graph (from `roam plan --budget ...`)")
    p.add_argument("-o", "--output", required=True, help="policy JSON to write")
    p.add_argument("--max-blocks", type=positive_int, default=1,
                   help="most repeated blocks one wrapped module may hold (default 1: torch "
                        "re-runs a checkpointed call at once in the backward)")
    p.add_argument("--json", action="store_true",
                   help="print the summary as one JSON object instead of a line")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from roam_core.formats.graph_io import load_graph
    from roam_core.formats.plan_io import load_plan
    from roam_core.formats.policy_io import save_policy
    from roam_core.recompute.checkpoint_export import export_checkpoint_policy

    graph = load_graph(args.graph)
    plan = load_plan(args.plan, graph=graph)
    wrappable = _wrappable_from_origin(graph.origin)
    export = export_checkpoint_policy(graph, plan, wrappable=wrappable,
                                      max_blocks=args.max_blocks)
    save_policy(export, args.output)
    guessed = "" if wrappable is not None else (
        " (model not rebuilt from the graph: wrappable modules guessed from the graph)")
    if args.json:
        print(json.dumps({
            "output": args.output, "modules": [m.module for m in export.modules],
            "dropped_bytes": export.dropped_bytes, "expressed_bytes": export.expressed_bytes,
            "unexpressed_bytes": export.unexpressed_bytes,
            "unexpressed_drops": len(export.unexpressed),
            "extra_saved_bytes": export.extra_saved_bytes,
            "recompute_flops": export.recompute_flops, "plan_extra_flops": plan.extra_flops,
            "wrappable_from_model": wrappable is not None}))
    else:
        print(f"{export.summary()}{guessed} -> {args.output}")
    return 0


def _wrappable_from_origin(origin: Mapping[str, Any]) -> Callable[[str], bool] | None:
    """Which modules have a ``forward``, from the model the origin rebuilds (meta device),
    or ``None`` when it cannot be rebuilt here."""
    if origin.get("source") != "zoo" and origin.get("builder") != "hf":
        return None
    try:
        from roam_core.runtime.checkpoint_policy import wrappable_modules

        if origin.get("source") == "zoo":
            from roam_core.runtime.origin import zoo_recipe

            return wrappable_modules(zoo_recipe(origin)[0])
        from roam_core.zoo.hf import hf_model_from_config

        cfg = dict(origin["hf_config"])
        return wrappable_modules(hf_model_from_config(
            cfg.pop("model_type"), origin.get("head", "causal-lm"), **cfg))
    except Exception as e:  # a model this install cannot rebuild: guess from the graph
        _logger.info("cannot rebuild the model of %s: %s", origin.get("model"), e)
    return None
