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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from roam_core.base.errors import TraceError

if TYPE_CHECKING:
    from roam_core.trace.traced_step import TracedStep

__all__ = ["ATTENTION_CHOICES", "HF_TASK_CHOICES", "PRECISION_CHOICES", "ModelChoice",
           "add_model_args", "hf_set", "model_choice"]

#: The choices, repeated here so that ``--help`` imports neither torch nor transformers
#: (a test checks them against roam_core.trace.precision / .attention / roam_core.zoo.hf).
PRECISION_CHOICES = ("fp32", "bf16-mixed", "bf16", "fp16-mixed")
ATTENTION_CHOICES = ("sdpa", "math", "flash", "efficient")
HF_TASK_CHOICES = ("causal-lm", "masked-lm", "seq2seq", "speech-seq2seq",
                   "image-classification", "sequence-classification", "base")
#: Zoo families that are transformers (``roam fit`` defaults them to bf16-mixed).
TRANSFORMER_FAMILIES = ("gpt", "roberta")
_TRANSFORMER_ZOO = ("vit_b_16",)


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


@dataclass(frozen=True)
class ModelChoice:
    """The model of a command line: a zoo name or an HF config, and its settings."""

    zoo: str | None
    hf_config: str | None
    hf_task: str
    hf_overrides: dict[str, Any] = field(default_factory=dict)
    precision: str | None = None
    attention: str | None = None

    @property
    def label(self) -> str:
        """How people call it: the zoo name or the config file."""
        return self.zoo or f"{self.hf_config} ({self.hf_task})"

    def is_transformer(self) -> bool:
        """Whether it is a transformer (any HF model; the zoo's GPT-2, RoBERTa, ViT)."""
        if self.hf_config is not None:
            return True
        from roam_core.zoo import ZOO

        spec = ZOO[self.zoo] if self.zoo in ZOO else None
        return spec is not None and (spec.family in TRANSFORMER_FAMILIES
                                     or spec.name in _TRANSFORMER_ZOO)

    def trace(self, batch_size: int, seq_len: int | None, *, setting: str = "steady",
              optimizer: str | None = None, device: str = "cpu",
              precision: str | None = None) -> TracedStep:
        """Trace one training step of this model (fake tensors)."""
        prec = precision or self.precision or "fp32"
        if self.zoo is not None:
            from roam_core.zoo import trace_zoo

            return trace_zoo(self.zoo, batch_size, seq_len, setting, optimizer,
                             attention=self.attention, device=device, precision=prec)
        from roam_core.zoo.hf import trace_hf

        return trace_hf(self.hf_config, batch_size, seq_len, head=self.hf_task,
                        setting=setting, optimizer=optimizer, precision=prec,
                        attention=self.attention or "sdpa", device=device,
                        **self.hf_overrides)


def model_choice(args: argparse.Namespace) -> ModelChoice:
    """The :class:`ModelChoice` of parsed arguments (one line errors for bad input)."""
    if (args.model is None) == (args.hf_config is None):
        raise TraceError("give a zoo model name or --hf-config CONFIG.json (exactly one)")
    if args.model is not None:
        from roam_core.zoo import ZOO

        if args.model not in ZOO:
            raise TraceError(f"unknown model {args.model!r}; choose one of: {', '.join(ZOO)} "
                             "(or --hf-config CONFIG.json for any Hugging Face model)")
        if args.hf_set:
            raise TraceError("--hf-set changes an --hf-config model; a zoo model has none")
    return ModelChoice(args.model, args.hf_config, args.hf_task, dict(args.hf_set),
                       args.precision, args.attention)
