"""``roam fit MODEL|--hf-config CONFIG.json --memory SIZE [--seq-lens ...] --json``: what fits.

Every batch size (and sequence length) of a zoo model or of a Hugging Face model built from
its config is traced (steady setting, AdamW, fake tensors) in the chosen precision and
checked against the memory ``SIZE`` four ways: PyTorch eager's reserved memory (the caching
allocator model), roam without recomputation (its arena), and roam with recomputation within
5% and 25% extra time (the cheapest plan whose arena fits ``SIZE``, counted when its extra
time is within the limit: the re-runs' estimated seconds on the device profile as a share of
the step's, :func:`roam_core.planner.whatfits.extra_time_pct`).  Transformers default to
``bf16-mixed`` (how they are trained), other models to ``fp32``; the output says which was
used and what attention kernel it assumes.

With ``--parallel fsdp|ddp --world-size W [W ...]`` each configuration is the step of one
rank (batch sizes per rank) and ``SIZE`` is the memory of one device; one sweep runs per
world size (``docs/parallel.md``).  A rank traces in ``fp32`` or, with FSDP, ``bf16-mixed``
(FSDP2's mixed precision policy): with DDP the transformers' default is ``fp32``, and the
output says so.

Locally, batch sizes are tried in increasing order and a sequence length stops at the first
batch nothing fits; ``--executor dask-local[:N]`` / ``dask://HOST:PORT`` runs every
configuration as one task on a Dask cluster and gives the same answer
(:mod:`roam_core.zoo.fit_sweep`).

``--json`` prints ``{"model", "precision", "precision_default", "attention",
"extra_time_estimate", "memory_bytes", "parallel", "configs": [...], "largest": {method:
{"batch_size", "seq_len"} | null}, "largest_by_seq_len": {T: {method: B | null}},
"largest_by_world_size": {W: {method: {"batch_size", "seq_len"} | null}}}`` (``largest``
and ``largest_by_seq_len``: the first world size; each config names its ``world_size``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from roam_core.base.executors import EXECUTOR_HELP
from roam_core.commands.arg_types import positive_int, size_bytes
from roam_core.commands.model_args import add_model_args, model_source
from roam_core.commands.parallel_args import add_parallel_args, parallel_setting, world_sizes
from roam_core.model.parallel import ParallelSetting

if TYPE_CHECKING:  # commands import quickly: the planner and torch only when run
    import concurrent.futures as cf
    from collections.abc import Sequence

    from roam_core.planner.whatfits import FitRow
    from roam_core.zoo.sources import ModelSource

__all__ = ["METHODS", "default_fit_precision", "fit_dict", "register"]

#: The methods compared, in report order.
METHODS = ("eager_reserved", "roam", "roam_recompute_5pct", "roam_recompute_25pct")
#: Tokens per sample of an --hf-config model when --seq-lens is not given.
HF_DEFAULT_SEQ_LEN = 2048


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``fit`` sub-command."""
    p = subparsers.add_parser(
        "fit", help="largest batch (and sequence length) that fits a memory size",
        description="Trace a zoo or Hugging Face model at several batch sizes and report the "
                    "largest that fits in SIZE for eager PyTorch (reserved), roam, and roam "
                    "with recomputation at <= 5% and <= 25% extra time. Transformers default "
                    "to bf16-mixed precision.")
    add_model_args(p, precision_default=None,
                   precision_help="default: bf16-mixed for transformers (any --hf-config, "
                                  "the zoo's GPT-2, Llama, RoBERTa, ViT; fp32 with --parallel "
                                  "ddp), fp32 otherwise")
    p.add_argument("--memory", type=size_bytes, required=True, metavar="SIZE",
                   help="device memory, e.g. 80GiB")
    p.add_argument("--batch-sizes", type=positive_int, nargs="+", default=[1, 2, 4, 8, 16, 32],
                   metavar="B")
    p.add_argument("--seq-lens", type=positive_int, nargs="+", default=None, metavar="T",
                   help=f"sequence lengths (token models; default: the zoo model's, "
                        f"{HF_DEFAULT_SEQ_LEN} for --hf-config)")
    p.add_argument("--device-profile", default=None, metavar="NAME",
                   help="device the extra time is estimated on: h100-sxm (default), "
                        "a100-80g, h200, cpu or cuda (measured by `roam calibrate`), or a "
                        "profile JSON file")
    p.add_argument("--workers", type=positive_int, default=1, metavar="N")
    p.add_argument("--executor", default="local", metavar="SPEC",
                   help=EXECUTOR_HELP + "; with Dask every configuration of the sweep is one "
                        "task on the cluster")
    p.add_argument("--merge-casts", action="store_true",
                   help="roam's methods plan the step with autocast's repeated casts of one "
                        "activation made once (bit-identical values; eager makes every copy, "
                        "so eager's column is unchanged); each configuration is traced twice")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    add_parallel_args(p, world_sizes=True)
    p.set_defaults(func=_run)


def _config_dict(r: FitRow, memory: int, par: ParallelSetting) -> dict[str, Any]:
    """One configuration as ``--json`` lists it."""
    fits = r.fits(memory)
    rec = [m for m in METHODS[2:] if fits.get(m)]
    return {"batch_size": r.batch_size, "seq_len": r.seq_len, "graph": r.graph_name,
            "world_size": par.world_size, "parallel": par.kind,
            "eager_reserved_bytes": r.peak_bytes["eager_reserved"],
            "roam_arena_bytes": r.peak_bytes["roam"], "step_flops": r.step_flops,
            "step_seconds": r.step_seconds, "device_profile": r.device_profile,
            "recompute_arena_bytes": r.peak_bytes[rec[0]] if rec else None,
            "recompute_extra_time_pct": r.extra_time_pct.get(rec[0]) if rec else None,
            "peak_bytes": dict(r.peak_bytes), "extra_time_pct": dict(r.extra_time_pct),
            "fits": {m: bool(fits.get(m)) for m in METHODS}}


def default_fit_precision(source: ModelSource, settings: Sequence[ParallelSetting]) -> str:
    """The precision ``roam fit`` uses when none is given: the source's default
    (``bf16-mixed`` for transformers), or ``fp32`` where a data-parallel rank does not trace
    in it (DDP)."""
    from roam_core.model.parallel import PARALLEL_PRECISIONS

    prec = source.default_precision()
    if any(p.active and prec not in PARALLEL_PRECISIONS[p.kind] for p in settings):
        return "fp32"
    return prec


def fit_dict(model: str | ModelSource, memory: int, batch_sizes: list[int],
             seq_lens: list[int] | None, workers: int = 1,
             executor: cf.Executor | None = None, *, precision: str | None = None,
             attention: str | None = None,
             settings: Sequence[ParallelSetting] | None = None,
             device_profile: str | None = None,
             merge_casts: bool = False) -> dict[str, Any]:
    """The object ``roam fit --json`` prints (``executor``: a Dask client's executor runs
    every configuration as a task, see :mod:`roam_core.zoo.fit_sweep`; ``settings``: one
    sweep per data-parallel world, default one device; ``device_profile``: where extra time
    is estimated, default the planner's; ``merge_casts``: roam plans the step with
    autocast's repeated casts made once, :mod:`roam_core.trace.identical_casts`)."""
    from roam_core.formats.device_profile_io import resolve_profile
    from roam_core.planner.config import PlannerConfig
    from roam_core.planner.whatfits import EXTRA_TIME_ESTIMATE, largest_fitting
    from roam_core.trace.attention import attention_note
    from roam_core.zoo.fit_sweep import fit_sweep
    from roam_core.zoo.sources import ModelSource

    source = model if isinstance(model, ModelSource) else ModelSource(model)
    planner = PlannerConfig(workers=workers)
    if device_profile is not None:
        planner = planner.with_recompute(device_profile=device_profile)
    profile = resolve_profile(planner.recompute.device_profile)  # unknown: fails before tracing
    worlds = list(settings) if settings else [ParallelSetting()]
    prec = precision or default_fit_precision(source, worlds)
    lengths: list[int | None] = list(seq_lens) if seq_lens else (
        [HF_DEFAULT_SEQ_LEN] if source.hf_config is not None else [None])
    configs: list[dict[str, Any]] = []
    by_world: dict[str, dict[str, Any]] = {}
    by_seq: dict[str, dict[str, int | None]] = {}
    for i, par in enumerate(worlds):
        rows = fit_sweep(source, batch_sizes, lengths, memory_bytes=memory, precision=prec,
                         attention=attention, planner=planner,
                         executor=executor, parallel=par, merge_casts=merge_casts)
        configs += [_config_dict(r, memory, par) for r in rows]
        best = largest_fitting(rows, memory)
        by_world[str(par.world_size)] = {
            m: (None if (r := best.get(m)) is None else
                {"batch_size": r.batch_size, "seq_len": r.seq_len}) for m in METHODS}
        if i == 0:
            for t in sorted({r.seq_len for r in rows}, key=lambda x: x or 0):
                per = largest_fitting([r for r in rows if r.seq_len == t], memory)
                by_seq[str(t)] = {m: (None if (r := per.get(m)) is None else r.batch_size)
                                  for m in METHODS}
    return {"model": source.label, "precision": prec,
            "precision_default": precision is None,
            "attention": attention_note(attention or "sdpa"),
            "extra_time_estimate": EXTRA_TIME_ESTIMATE, "device_profile": profile.name,
            "memory_bytes": memory, "merge_casts": merge_casts,
            "parallel": worlds[0].kind, "configs": configs,
            "largest": by_world[str(worlds[0].world_size)],
            "largest_by_seq_len": by_seq, "largest_by_world_size": by_world}


def _run(args: argparse.Namespace) -> int:
    from roam_core.base.executors import open_executor, parse_executor
    from roam_core.base.units import format_bytes

    source = model_source(args)
    spec = parse_executor(args.executor)  # a bad spec fails before any tracing
    settings = [parallel_setting(args, w) for w in world_sizes(args)]
    if args.precision is None and not args.json:
        prec = default_fit_precision(source, settings)
        why = ("the default for transformers" if prec != "fp32" and source.is_transformer()
               else "the default for this model" if not source.is_transformer()
               else f"the transformers' bf16-mixed is not traced with --parallel "
                    f"{settings[0].kind}")
        print(f"precision: {prec} ({why}; --precision to choose)", file=sys.stderr)
    with open_executor(spec) as executor:
        d = fit_dict(source, args.memory, args.batch_sizes, args.seq_lens, args.workers,
                     executor, precision=args.precision, attention=args.attention,
                     settings=settings, device_profile=args.device_profile,
                     merge_casts=args.merge_casts)
    if args.json:
        print(json.dumps(d, sort_keys=True))
        return 0
    if d["merge_casts"]:
        # the roam rows are for the merged step: say how to run that step, not eager's
        print("note: roam's rows are for the step with merged casts: train it with `roam trace "
              "... --merge-casts` + `roam execute`, or `roam train ... --merge-casts` "
              "(docs/precision.md)", file=sys.stderr)
    print(f"{d['model']} in {format_bytes(args.memory)}, {d['precision']}, "
          f"attention {d['attention']}"
          + (", roam with repeated casts made once" if d["merge_casts"] else "")
          + f"; {d['extra_time_estimate']}, on {d['device_profile']}:")
    if not any(par.active for par in settings):
        for t, per in d["largest_by_seq_len"].items():
            if t != "None":
                print(f" seq {t}:")
            for m in METHODS:
                b = per[m]
                print(f"  {_label(m):<34} {'nothing fits' if b is None else f'batch {b}'}")
        return 0
    for par in settings:
        print(f" per rank ({par.describe()}), memory of one device:")
        for m in METHODS:
            best = d["largest_by_world_size"][str(par.world_size)][m]
            what = "nothing fits" if best is None else (
                f"batch {best['batch_size']}" + (f", seq {best['seq_len']}" if best["seq_len"]
                                                 else ""))
            print(f"  {_label(m):<34} {what}")
    return 0


def _label(method: str) -> str:
    from roam_core.planner.whatfits import method_label

    return method_label(method)
