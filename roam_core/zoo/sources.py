"""Where a traced step's model comes from: a zoo name or a Hugging Face config.

:class:`ModelSource` is what ``roam trace`` / ``roam fit`` / ``roam train`` and the app's
trace panel and what-fits card agree on: one picklable value (a zoo name, or a config path or
dict with its task and overrides) that traces a training step at any batch size, sequence
length, precision and attention kernel.  Transformers default to ``bf16-mixed`` where a
precision is not given by the user (:meth:`ModelSource.default_precision`): that is how
they are trained.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from roam_core.base.errors import ConfigError, TraceError
from roam_core.zoo.registry import ZOO

if TYPE_CHECKING:
    from roam_core.model.parallel import ParallelSetting
    from roam_core.trace.traced_step import TracedStep

__all__ = ["TRANSFORMER_ZOO", "ModelSource"]

#: Zoo models that are transformers (their default precision is bf16-mixed).
TRANSFORMER_ZOO = frozenset(n for n, s in ZOO.items()
                            if s.family in ("gpt", "roberta") or n == "vit_b_16")


@dataclass(frozen=True)
class ModelSource:
    """A zoo model or a Hugging Face config (exactly one).

    Parameters
    ----------
    zoo : str, optional
        A key of :data:`~roam_core.zoo.registry.ZOO`.
    hf_config : str or Mapping, optional
        A ``config.json`` path (or folder), a config dict, or a model type
        (:func:`roam_core.zoo.hf.load_hf_config`).
    hf_task : str
        The HF task (:data:`roam_core.zoo.hf.HF_TASKS`).
    hf_overrides : Mapping
        Config settings to change.
    """

    zoo: str | None = None
    hf_config: Any = None
    hf_task: str = "causal-lm"
    hf_overrides: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.zoo is None) == (self.hf_config is None):
            raise TraceError("give a zoo model name or a Hugging Face config (exactly one)")
        if self.zoo is not None and self.zoo not in ZOO:
            raise TraceError(f"unknown model {self.zoo!r}; choose one of: {', '.join(ZOO)} "
                             "(or a Hugging Face config.json)")

    @property
    def label(self) -> str:
        """How people call it: the zoo name, or the config and task."""
        if self.zoo is not None:
            return self.zoo
        name = (self.hf_config if isinstance(self.hf_config, str)
                else dict(self.hf_config).get("model_type", "config"))
        return f"{name} ({self.hf_task})"

    def is_transformer(self) -> bool:
        """Any HF model, and the zoo's GPT-2, RoBERTa and ViT."""
        return self.hf_config is not None or self.zoo in TRANSFORMER_ZOO

    def default_precision(self) -> str:
        """``bf16-mixed`` for transformers (how they are trained), else ``fp32``."""
        return "bf16-mixed" if self.is_transformer() else "fp32"

    def trace(self, batch_size: int, seq_len: int | None, *, setting: str = "steady",
              optimizer: str | None = None, precision: str = "fp32",
              attention: str | None = None, device: str = "cpu",
              parallel: ParallelSetting | None = None, spec: Any = None,
              merge_casts: bool = False) -> TracedStep:
        """Trace one training step (fake tensors; nothing is allocated); ``parallel``: the
        step of one data-parallel rank (zoo models only, ``docs/parallel.md``); ``spec``:
        clipping and accumulation (:class:`~roam_core.trace.step_spec.StepSpec`);
        ``merge_casts``: autocast's repeated casts made once
        (:mod:`roam_core.trace.identical_casts`).

        Raises
        ------
        ConfigError
            ``parallel`` with a Hugging Face config (not supported in this version).
        """
        if self.zoo is not None:
            from roam_core.zoo.steps import trace_zoo

            return trace_zoo(self.zoo, batch_size, seq_len, setting, optimizer,
                             attention=attention, device=device, parallel=parallel,
                             precision=precision, spec=spec, merge_casts=merge_casts)
        if parallel is not None and parallel.active:
            raise ConfigError(f"--parallel {parallel.kind} is supported for zoo models only "
                              "in this version, not with --hf-config")
        from roam_core.zoo.hf import trace_hf

        return trace_hf(self.hf_config, batch_size, seq_len, head=self.hf_task,
                        setting=setting, optimizer=optimizer, precision=precision,
                        attention=attention or "sdpa", device=device, spec=spec,
                        merge_casts=merge_casts, **dict(self.hf_overrides))
