"""The model a command traces: a zoo name or a Hugging Face config, with its precision.

``roam trace``, ``roam fit`` and ``roam train`` take the same model options::

    MODEL                               a zoo model (roam trace --help lists them), or
    --hf-config CONFIG.json             any Hugging Face model from its config (no weights)
      --hf-task TASK                    causal-lm (default), masked-lm, seq2seq, ...
      --hf-set KEY=VALUE                change a config setting (value parsed as JSON)
    --precision fp32|bf16-mixed|bf16|fp16-mixed
    --attention sdpa|math|flash|efficient

Module-level imports stay light: torch and the zoo are imported when a model is built.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from roam_core.base.errors import TraceError

if TYPE_CHECKING:
    from roam_core.zoo.sources import ModelSource

__all__ = ["ATTENTION_CHOICES", "HF_TASK_CHOICES", "PRECISION_CHOICES", "add_model_args",
           "hf_set", "model_source"]

#: The choices, repeated here so that ``--help`` imports neither torch nor transformers
#: (a test checks them against roam_core.trace.precision / .attention / roam_core.zoo.hf).
PRECISION_CHOICES = ("fp32", "bf16-mixed", "bf16", "fp16-mixed")
ATTENTION_CHOICES = ("sdpa", "math", "flash", "efficient")
HF_TASK_CHOICES = ("causal-lm", "masked-lm", "seq2seq", "speech-seq2seq",
                   "image-classification", "sequence-classification", "base")
def hf_set(text: str) -> tuple[str, Any]:
    """argparse type of ``--hf-set KEY=VALUE``: the value parsed as JSON when it is JSON."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def add_model_args(p: argparse.ArgumentParser, *, precision_default: str | None = "fp32",
                   precision_help: str = "") -> None:
    """Add ``MODEL``, ``--hf-config``, ``--hf-task``, ``--hf-set``, ``--precision``,
    ``--attention``."""
    p.add_argument("model", nargs="?", default=None,
                   help="zoo model name, e.g. gpt2, gpt2-xl, mobilenet_v2, roberta-base, mlp, "
                        "tiny_gpt (or --hf-config)")
    p.add_argument("--hf-config", default=None, metavar="CONFIG.json",
                   help="a Hugging Face config.json (or its folder): the model is built "
                        "from it offline with no weights")
    p.add_argument("--hf-task", choices=HF_TASK_CHOICES, default="causal-lm",
                   help="the model head and loss of --hf-config (default causal-lm)")
    p.add_argument("--hf-set", type=hf_set, action="append", default=[], metavar="KEY=VALUE",
                   help="change a setting of --hf-config, e.g. num_hidden_layers=2 or "
                        "experts_implementation=batched_mm (repeatable)")
    p.add_argument("--precision", choices=PRECISION_CHOICES, default=precision_default,
                   help=precision_help or "fp32 (default), bf16-mixed (autocast bf16, fp32 "
                        "master weights), bf16 (everything bf16), fp16-mixed (autocast fp16 "
                        "+ GradScaler)")
    p.add_argument("--attention", choices=ATTENTION_CHOICES, default=None,
                   help="attention kernel: sdpa (torch picks; default, math for the zoo's "
                        "roam setting), math, flash, efficient (on CPU modelled by the "
                        "flash kernel)")


def model_source(args: argparse.Namespace) -> ModelSource:
    """The :class:`~roam_core.zoo.sources.ModelSource` of parsed arguments (one-line errors
    for bad input)."""
    from roam_core.zoo.sources import ModelSource

    if args.model is not None and args.hf_set:
        raise TraceError("--hf-set changes an --hf-config model; a zoo model has none")
    if (args.model is None) == (args.hf_config is None):
        raise TraceError("give a zoo model name or --hf-config CONFIG.json (exactly one)")
    return ModelSource(args.model, args.hf_config, args.hf_task, dict(args.hf_set))
