"""Any Hugging Face ``transformers`` model from its config: built offline, with no weights.

``transformers`` is optional (``pip install roam[hf]``); this module imports it lazily and
raises :class:`~roam_core.base.errors.TraceError` when it is missing.  A model is built from a
``config.json`` file, a config dict, a config object or a model type (``"llama"``: that
type's default hyper-parameters), on the meta device for tracing (nothing downloaded,
nothing allocated) or on a real device with a seeded init for running.  Tracing goes through
the same :func:`roam_core.trace.trace_fx` as everything else.

Tasks (``--hf-task``) and what one training step feeds the model:

=========================  ===================================  ===========================
task                       model class                          batch (loss)
=========================  ===================================  ===========================
``causal-lm``              ``AutoModelForCausalLM``             ids ``[B, T]`` (labels = ids)
``masked-lm``              ``AutoModelForMaskedLM``             ids ``[B, T]`` (labels = ids)
``seq2seq``                ``AutoModelForSeq2SeqLM``            ids ``[B, T]`` (labels = ids;
                                                                decoder inputs from labels)
``speech-seq2seq``         ``AutoModelForSpeechSeq2Seq``        features ``[B, mel, 2 x
                                                                max_source_positions]``,
                                                                labels ``[B, T]``
``image-classification``   ``AutoModelForImageClassification``  pixels ``[B, C, S, S]``,
                                                                labels ``[B]``
``sequence-classification`` ``AutoModelForSequenceClassification`` ids ``[B, T]``, labels
                                                                ``[B]``
``base``                   ``AutoModel``                        ids; cross-entropy of the last
                                                                hidden states vs zeros
=========================  ===================================  ===========================

The graph's origin records the config, the task and every setting
(``{"source": "hf", "hf_config": {...}, "hf_overrides": {...}, "task", ...}``), so
``roam execute`` and ``roam train`` rebuild the model (:func:`hf_step_from_origin`).  HF
models keep their configured dropout; the attention kernel is chosen with ``attention=``
(:mod:`roam_core.trace.attention`).  A model that cannot be traced raises a
:class:`TraceError` naming the op, the module and the way out (``docs/hf.md`` lists them).

Example (with transformers installed)::

    from roam_core.zoo.hf import trace_hf
    ts = trace_hf("llama", batch_size=1, seq_len=128, num_hidden_layers=2)
    graph = ts.graph
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from roam_core.base.errors import TraceError
from roam_core.model.frozen import thaw
from roam_core.trace.attention import check_attention, sdpa_backend
from roam_core.zoo.steps import ZooStep

if TYPE_CHECKING:
    from roam_core.trace.traced_step import TracedStep

__all__ = [
    "HEADS",
    "HF_TASKS",
    "build_hf_step",
    "hf_batches",
    "hf_model_from_config",
    "hf_origin",
    "hf_step",
    "hf_step_from_origin",
    "import_transformers",
    "load_hf_config",
    "trace_hf",
]

_logger = logging.getLogger(__name__)

#: ``--hf-task`` -> the ``AutoModel*`` class that builds the model.
HF_TASKS = {"causal-lm": "AutoModelForCausalLM", "masked-lm": "AutoModelForMaskedLM",
            "seq2seq": "AutoModelForSeq2SeqLM",
            "speech-seq2seq": "AutoModelForSpeechSeq2Seq",
            "image-classification": "AutoModelForImageClassification",
            "sequence-classification": "AutoModelForSequenceClassification",
            "base": "AutoModel"}
#: Older task names still accepted.
_ALIASES = {"seq2seq-lm": "seq2seq"}
#: The tasks by their former name (``head=``).
HEADS = HF_TASKS


def import_transformers() -> Any:
    """The ``transformers`` module, or a :class:`TraceError` saying how to install it."""
    try:
        import transformers
    except ImportError as e:
        raise TraceError("Hugging Face models need the optional 'transformers' package "
                         "(pip install 'roam[hf]')") from e
    return transformers


def _task(task: str) -> str:
    task = _ALIASES.get(task, task)
    if task not in HF_TASKS:
        raise TraceError(f"unknown Hugging Face task {task!r}; choose one of "
                         f"{', '.join(HF_TASKS)}")
    return task


def load_hf_config(source: Any, **overrides: Any) -> Any:
    """A ``transformers`` config, offline, with ``overrides`` applied.

    Parameters
    ----------
    source : str, os.PathLike, Mapping or PretrainedConfig
        A ``config.json`` path (or a folder holding one), a config dict (with
        ``model_type``), a config object (copied), or a model type such as ``"llama"``
        (that type's defaults).
    **overrides
        Config settings to change (``num_hidden_layers=2``,
        ``experts_implementation="batched_mm"``...).

    Raises
    ------
    TraceError
        Unreadable file, no or unknown ``model_type``.
    """
    tf = import_transformers()
    if isinstance(source, tf.PretrainedConfig):
        cfg = source.__class__.from_dict(source.to_dict())
        _apply(cfg, overrides)
        return cfg
    if isinstance(source, (str, os.PathLike)) and (
            str(source).endswith(".json") or os.path.isdir(source)):
        path = os.path.join(source, "config.json") if os.path.isdir(source) else source
        try:
            with open(path, encoding="utf-8") as f:
                source = json.load(f)
        except (OSError, ValueError) as e:
            raise TraceError(f"cannot read the Hugging Face config {str(path)!r}: {e}") from e
    if isinstance(source, Mapping):
        d = dict(source)
        model_type = d.pop("model_type", None)
        if not model_type:
            raise TraceError("the Hugging Face config has no 'model_type'")
    else:
        model_type, d = str(source), {}
    # overrides go to the constructor: it derives settings from them (key/value heads...)
    d.update(overrides)
    try:
        return tf.AutoConfig.for_model(model_type, **d)
    except (ValueError, KeyError) as e:
        raise TraceError(f"unknown Hugging Face model type {model_type!r}: {e}") from e


def _apply(cfg: Any, overrides: Mapping[str, Any]) -> None:
    for k, v in overrides.items():
        if k == "experts_implementation":  # the public name of a property-backed setting
            cfg._experts_implementation = v
        else:
            setattr(cfg, k, v)


def hf_model_from_config(config: Any, head: str = "causal-lm", *,
                         device: str | torch.device = "meta", seed: int = 0,
                         **overrides: Any) -> nn.Module:
    """Build an HF model in training mode from a config (see :func:`load_hf_config`).

    On the meta device nothing is allocated; on a real device the model gets HF's own
    initialisation after ``torch.manual_seed(seed)``.

    Raises
    ------
    TraceError
        Unknown task, or a config the model class rejects (the message says why).
    """
    tf = import_transformers()
    task = _task(head)
    cfg = load_hf_config(config, **overrides)
    dev = torch.device(device)
    if dev.type != "meta":
        torch.manual_seed(seed)
    try:
        with dev:
            model = getattr(tf, HF_TASKS[task]).from_config(cfg)
    except (ValueError, AssertionError, AttributeError, TypeError, KeyError) as e:
        raise TraceError(f"building {cfg.model_type} for task {task!r} from the config "
                         f"failed: {type(e).__name__}: {e}") from e
    return model.train()


class _HFStep(nn.Module):
    """One task's forward: the model's own loss (``base``: the last hidden states), run
    with the chosen attention kernel."""

    #: graph module paths and tensor names are those of the HF model
    roam_name_scope = "model"

    model: nn.Module  # the Hugging Face model

    def __init__(self, model: nn.Module, task: str, attention: str) -> None:
        super().__init__()
        self.model, self.task, self.attention = model, task, attention

    def forward(self, *batch: torch.Tensor) -> torch.Tensor:
        with sdpa_backend(self.attention, batch[0].device.type):
            t = self.task
            if t == "base":
                return self.model(input_ids=batch[0]).last_hidden_state
            if t in ("causal-lm", "masked-lm", "seq2seq"):
                return self.model(input_ids=batch[0], labels=batch[0]).loss
            if t == "speech-seq2seq":
                return self.model(input_features=batch[0], labels=batch[1]).loss
            if t == "image-classification":
                return self.model(pixel_values=batch[0], labels=batch[1]).loss
            return self.model(input_ids=batch[0], labels=batch[1]).loss


def ce_zeros(out: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out, torch.zeros_like(out))


def _shapes(cfg: Any, task: str, batch_size: int,
            seq_len: int | None) -> list[tuple[tuple[int, ...], torch.dtype, int]]:
    """``(shape, dtype, high)`` of each input (``high``: ids/labels drawn below it)."""
    b = batch_size
    if task == "image-classification":
        size = int(getattr(cfg, "image_size", 224) or 224)
        chans = int(getattr(cfg, "num_channels", 3) or 3)
        return [((b, chans, size, size), torch.float32, 0),
                ((b,), torch.long, int(cfg.num_labels))]
    if seq_len is None:
        raise TraceError(f"the Hugging Face task {task!r} needs a sequence length")
    vocab = int(getattr(cfg, "vocab_size", 0) or 2)
    if task == "speech-seq2seq":
        frames = 2 * int(cfg.max_source_positions)  # the encoder's fixed input length
        return [((b, int(cfg.num_mel_bins), frames), torch.float32, 0),
                ((b, seq_len), torch.long, vocab)]
    ids = ((b, seq_len), torch.long, vocab)
    if task == "sequence-classification":
        return [ids, ((b,), torch.long, int(cfg.num_labels))]
    return [ids]


def _inputs(shapes: Sequence[tuple[tuple[int, ...], torch.dtype, int]],
            device: torch.device, seed: int) -> list[torch.Tensor]:
    if device.type == "meta":
        return [torch.empty(s, dtype=d, device=device) for s, d, _ in shapes]
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randint(0, h, s, generator=gen, dtype=d) if h
             else torch.randn(s, generator=gen, dtype=d)).to(device) for s, d, h in shapes]


def build_hf_step(config: Any, batch_size: int, seq_len: int | None = None, *,
                  task: str = "causal-lm", setting: str = "steady",
                  optimizer: str | None = None, attention: str = "sdpa",
                  device: str | torch.device = "meta", seed: int = 0,
                  **overrides: Any) -> ZooStep:
    """``(model, example_inputs, loss_fn, optimizer_factory)`` of one HF training step.

    Parameters
    ----------
    config : path, Mapping, PretrainedConfig or str
        See :func:`load_hf_config`.
    batch_size, seq_len : int
        Samples per step; tokens per sample (not for ``image-classification``).
    task : str
        One of :data:`HF_TASKS` (see the module notes for the batch of each).
    setting, optimizer
        As for :func:`roam_core.zoo.build_zoo_step`.
    attention : {"sdpa", "math", "flash", "efficient"}
        The attention kernel (:mod:`roam_core.trace.attention`).
    device : str or torch.device
        ``"meta"`` (tracing) or a real device (HF's init and a batch, seeded).
    seed : int
        Seed of the init and the batch.
    **overrides
        Config settings to change.
    """
    from roam_core.trace.optimizers import make_optimizer_factory

    if batch_size < 1:
        raise TraceError(f"batch size must be positive, got {batch_size}")
    task = _task(task)
    check_attention(attention)
    _, factory = make_optimizer_factory(optimizer, setting)
    model = hf_model_from_config(config, task, device=device, seed=seed, **overrides)
    dev = torch.device(device)
    inputs = _inputs(_shapes(model.config, task, batch_size, seq_len), dev, seed + 1)
    wrapped = _HFStep(model, task, attention)
    loss_fn: Callable[[Any], torch.Tensor] | None = ce_zeros if task == "base" else None
    return ZooStep(wrapped, tuple(inputs), loss_fn, factory)


def hf_step(config: Any, batch_size: int, seq_len: int | None = None, *,
            head: str = "causal-lm", **overrides: Any) -> tuple[nn.Module, list[Any], Any]:
    """``(model, example_inputs, loss_fn)`` of one HF step on the meta device (see
    :func:`build_hf_step`; ``loss_fn`` is ``None`` when the model returns its loss)."""
    s = build_hf_step(config, batch_size, seq_len, task=head, **overrides)
    return s.model, list(s.example_inputs), s.loss_fn


def hf_origin(config: Any, task: str, batch_size: int, seq_len: int | None, *,
              setting: str = "steady", optimizer: str | None = None,
              attention: str = "sdpa", precision: str = "fp32",
              overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``Graph.origin`` record of an HF step: enough to rebuild it offline."""
    from roam_core.trace.optimizers import make_optimizer_factory

    tf = import_transformers()
    cfg = load_hf_config(config)
    task = _task(task)
    return {"source": "hf", "model": cfg.model_type, "task": task,
            "hf_config": json.loads(cfg.to_json_string(use_diff=False)),
            "hf_overrides": dict(overrides or {}), "batch_size": batch_size,
            "seq_len": None if task == "image-classification" else seq_len,
            "setting": setting, "optimizer": make_optimizer_factory(optimizer, setting)[0],
            "attention": attention, "precision": precision, "torch": torch.__version__,
            "transformers": tf.__version__}


def hf_step_from_origin(origin: Mapping[str, Any], device: str | torch.device = "meta",
                        seed: int = 0) -> ZooStep:
    """Rebuild the step an HF graph was traced from (its ``origin``)."""
    try:
        # a graph's origin is frozen; transformers fills in the config it is given
        cfg, task, b = thaw(origin["hf_config"]), origin["task"], int(origin["batch_size"])
    except (KeyError, TypeError, ValueError) as e:
        raise TraceError(f"graph origin lacks the Hugging Face settings: {e}") from e
    return build_hf_step(cfg, b, origin.get("seq_len"), task=task,
                         setting=origin.get("setting", "steady"),
                         optimizer=origin.get("optimizer"),
                         attention=origin.get("attention", "sdpa"), device=device, seed=seed,
                         **thaw(dict(origin.get("hf_overrides") or {})))


def hf_batches(step: ZooStep, steps: int, seed: int) -> list[list[torch.Tensor]]:
    """``steps`` batches shaped like ``step``'s (valid ids and labels), from a fixed seed."""
    model = step.model
    cfg = model.model.config if isinstance(model, _HFStep) else model.config
    task = model.task if isinstance(model, _HFStep) else "causal-lm"
    ex = step.example_inputs
    b = int(ex[0].shape[0])
    t = int(ex[-1].shape[1]) if task in ("speech-seq2seq",) else (
        int(ex[0].shape[1]) if ex[0].dim() == 2 else None)
    shapes = _shapes(cfg, task, b, t)
    return [_inputs(shapes, ex[0].device, seed + i) for i in range(steps)]


def trace_hf(config: Any, batch_size: int, seq_len: int | None, *, head: str = "causal-lm",
             setting: str = "steady", optimizer: str | None = None,
             precision: str = "fp32", attention: str = "sdpa", device: str = "cpu",
             spec: Any = None, merge_casts: bool = False, **overrides: Any) -> TracedStep:
    """Trace one training step of an HF model built from a config; returns a TracedStep.

    ``head`` is the task (:data:`HF_TASKS`); ``Graph.origin`` is :func:`hf_origin`'s record
    and the graph is named ``hf-<model type>-b<B>[-t<T>]-<setting>``.  ``spec``: the step's
    clipping and accumulation (:class:`~roam_core.trace.step_spec.StepSpec`);
    ``merge_casts``: autocast's repeated casts made once
    (:mod:`roam_core.trace.identical_casts`).
    """
    from roam_core.trace.tracer import trace_fx

    task = _task(head)
    step = build_hf_step(config, batch_size, seq_len, task=task, setting=setting,
                         optimizer=optimizer, attention=attention, **overrides)
    wrapped: Any = step.model  # an _HFStep; its config is a PretrainedConfig (untyped here)
    cfg = wrapped.model.config
    origin = hf_origin(cfg, task, batch_size, seq_len, setting=setting, optimizer=optimizer,
                       attention=attention, precision=precision, overrides=overrides)
    t = origin["seq_len"]
    name = f"hf-{cfg.model_type}-b{batch_size}" + (f"-t{t}" if t else "") + f"-{setting}"
    return trace_fx(step.model, step.example_inputs, step.loss_fn, step.optimizer_factory,
                    setting=setting, name=name, origin=origin, precision=precision,
                    device=device, spec=spec, merge_casts=merge_casts)
