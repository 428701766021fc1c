"""The sweep: trace the model at each batch size / sequence length (torch in the job process
only), measure eager reserved, roam and roam with recomputation, and cache every row (model,
configuration and planner settings), so a wider sweep re-uses what was measured."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.analysis.settings import PlanSettings
from app.core import state
from roam_core.base.cancel import CancelFlag
from roam_core.base.errors import ConfigError
from roam_core.model.graph import Graph
from roam_core.model.parallel import ParallelSetting
from roam_core.planner.whatfits import FitRow

__all__ = ["MAX_CONFIGS", "MAX_CONFIGS_LARGE", "MAX_CONFIGS_XL", "SMALL_MODELS", "XL_MODELS",
           "Sweep", "known_rows", "max_configs", "sweep", "sweep_rows"]

#: Most configurations one sweep measures: the teaching models (seconds each), the zoo's
#: CNNs, ViT and GPT-2 (about 20 s each on a CPU; Cancel keeps the rows measured), and the
#: models of billions of parameters (a minute or more each).
MAX_CONFIGS, MAX_CONFIGS_LARGE, MAX_CONFIGS_XL = 12, 8, 3


#: Zoo models that trace and plan in seconds on a CPU.
SMALL_MODELS = frozenset({"mlp", "tiny_gpt", "residual_block", "teach_order", "teach_updates",
                          "teach_layout", "teach_recompute"})
#: Zoo models whose every configuration takes a minute or more to trace and plan.
XL_MODELS = frozenset({"gpt2-xl"})


def max_configs(model: str) -> int:
    """How many configurations one sweep of ``model`` may measure.

    >>> max_configs("mlp"), max_configs("gpt2"), max_configs("gpt2-xl")
    (12, 8, 3)
    """
    if model in SMALL_MODELS:
        return MAX_CONFIGS
    return MAX_CONFIGS_XL if model in XL_MODELS else MAX_CONFIGS_LARGE


@dataclass(frozen=True)
class Sweep:
    """A sweep's outcome: the rows it measured (or found cached) and whether a cancel cut
    it short."""

    rows: list[FitRow]
    cancelled: bool = False
    total: int = 0


def _plain(settings: PlanSettings) -> dict[str, Any]:
    """The settings with every number a float: they come back from the browser as
    JavaScript numbers (``512.0`` returns as ``512``), and must name the same rows."""
    return {k: float(v) if isinstance(v, int | float) and not isinstance(v, bool) else v
            for k, v in settings.as_dict().items()}


def _world(parallel: ParallelSetting | None) -> list[dict[str, Any]]:
    """The data-parallel part of a cache key (empty for one device: those keys unchanged)."""
    return [parallel.to_dict()] if parallel is not None and parallel.active else []


#: Rows measured before extra time was estimated in seconds (FLOP shares) are not re-used.
_ROW_FORMAT = "time"


def _merged(merge_casts: bool) -> list[str]:
    """The merged-casts part of a cache key (empty when off: those keys unchanged)."""
    return ["merge_casts"] if merge_casts else []


def _settings_blob(model: str, settings: PlanSettings, precision: str,
                   parallel: ParallelSetting | None = None, merge_casts: bool = False) -> str:
    return json.dumps([model, "steady", "adamw", _plain(settings), precision, _ROW_FORMAT,
                       *_world(parallel), *_merged(merge_casts)], sort_keys=True)


def _row_key(model: str, b: int, t: int | None, settings: PlanSettings,
             precision: str = "fp32", parallel: ParallelSetting | None = None,
             merge_casts: bool = False) -> str:
    blob = json.dumps([model, b, t, "steady", "adamw", _plain(settings), precision,
                       _ROW_FORMAT, *_world(parallel), *_merged(merge_casts)],
                      sort_keys=True)
    return "fit-" + hashlib.sha256(blob.encode()).hexdigest()[:32]


def _index_key(model: str, settings: PlanSettings, precision: str,
               parallel: ParallelSetting | None = None, merge_casts: bool = False) -> str:
    """Cache key of the list of every row measured for ``model`` under these settings."""
    blob = _settings_blob(model, settings, precision, parallel, merge_casts)
    return "fit-index-" + hashlib.sha256(blob.encode()).hexdigest()[:32]


def _remember(model: str, settings: PlanSettings, key: str, precision: str = "fp32",
              parallel: ParallelSetting | None = None, merge_casts: bool = False) -> None:
    index = _index_key(model, settings, precision, parallel, merge_casts)
    keys = state.get_json(index, [])
    if key not in keys:
        state.put_json(index, [*keys, key])


def known_rows(model: str, settings: PlanSettings, precision: str = "fp32",
               parallel: ParallelSetting | None = None,
               merge_casts: bool = False) -> list[FitRow]:
    """Every configuration of ``model`` measured so far under these settings (by any sweep),
    smallest first: the answer is about all of them, not only the last sweep's."""
    index = _index_key(model, settings, precision, parallel, merge_casts)
    rows = [FitRow.from_dict(d) for k in state.get_json(index, [])
            if (d := state.get_json(k)) is not None]
    return sorted(rows, key=lambda r: (r.seq_len or 0, r.batch_size))


def sweep_rows(result: Mapping[str, Any] | None) -> list[FitRow]:
    """Every configuration measured for the last sweep's model and settings (earlier sweeps
    included); the last sweep's own rows when its settings are not recorded."""
    if not result:
        return []
    own = [FitRow.from_dict(d) for d in result.get("rows") or []]
    known: list[FitRow] = []
    if result.get("model") and result.get("settings"):
        try:
            known = known_rows(result["model"], PlanSettings(**result["settings"]),
                               result.get("precision") or "fp32",
                               ParallelSetting.from_mapping(result.get("parallel")),
                               bool(result.get("merge_casts")))
        except TypeError:  # settings of another version of the app
            pass
    # the sweep's own rows always count (a row is one batch size and sequence length)
    rows = {(r.seq_len or 0, r.batch_size): r for r in [*known, *own]}
    return [rows[k] for k in sorted(rows)]


def sweep(model: str, batch_sizes: Sequence[int], seq_lens: Sequence[int | None],
          settings: PlanSettings,
          progress: Callable[[int, int, str], None] | None = None,
          trace: Callable[[str, int, int | None, bool], Graph] | None = None,
          cancel: CancelFlag | None = None, precision: str = "fp32",
          parallel: ParallelSetting | None = None, merge_casts: bool = False) -> Sweep:
    """Measure every (batch, sequence length) of ``model`` (cached rows are re-used).

    ``trace(model, batch, seq_len, merge_casts)`` returns a graph (default: the zoo tracer,
    steady setting, AdamW, in ``precision``; with ``parallel``, the step of one rank, so
    every row is per rank).  ``merge_casts``: roam's methods plan the step with autocast's
    repeated casts made once, eager's column stays the step as eager runs it (every cast),
    as ``roam fit --merge-casts``: each configuration is traced twice.  ``cancel`` stops
    the sweep between configurations; the rows measured are kept (and cached).

    Raises
    ------
    ConfigError
        An empty sweep, or more configurations than allowed for this model.
    """
    from roam_core.planner.config import PlannerConfig
    from roam_core.planner.whatfits import fit_row

    configs = [(b, t) for t in (seq_lens or [None]) for b in sorted(batch_sizes)]
    if not configs:
        raise ConfigError("give at least one batch size")
    cap = max_configs(model)
    if len(configs) > cap:
        raise ConfigError(
            f"{model}: {len(configs)} configurations is too many for one sweep (at most {cap}"
            + ("" if model in SMALL_MODELS else
               "; each configuration of this model is traced and planned, which takes "
               + ("minutes" if model in XL_MODELS else "about 20 s") + " on a CPU; rows "
               "measured earlier are kept, so sweep the rest next") + ")")
    par = parallel or ParallelSetting()
    if trace is None:
        def trace(m: str, b: int, t: int | None, merge: bool) -> Graph:
            from roam_core.zoo import trace_zoo

            return trace_zoo(m, b, t, "steady", "adamw", precision=precision,
                             parallel=par, merge_casts=merge).graph

    cfg = PlannerConfig(time_limit_s=settings.time_limit_s, node_limit=settings.node_limit,
                        workers=settings.workers, alignment_bytes=settings.alignment_bytes)
    rows: list[FitRow] = []
    for i, (b, t) in enumerate(configs):
        if cancel is not None and cancel():
            if progress is not None:
                progress(i, len(configs), f"cancelled after {i} of {len(configs)} "
                                          "configurations: showing the rows measured")
            return Sweep(rows, True, len(configs))
        what = f"{model} batch {b}" + (f", seq {t}" if t else "")
        if progress is not None:
            progress(i, len(configs), f"{i}/{len(configs)}: tracing and planning {what}")
        key = _row_key(model, b, t, settings, precision, par, merge_casts)
        cached = state.get_json(key)
        if cached is not None:
            rows.append(FitRow.from_dict(cached))
            _remember(model, settings, key, precision, par, merge_casts)
            continue
        graph = trace(model, b, t, False)
        eager = None
        if merge_casts:  # eager runs every cast: its column is the unmerged step's
            eager, graph = graph, trace(model, b, t, True)
        row = fit_row(graph, cfg, batch_size=b, seq_len=t or graph.origin.get("seq_len"),
                      eager_graph=eager)
        state.put_json(key, row.to_dict())
        _remember(model, settings, key, precision, par, merge_casts)
        rows.append(row)
    if progress is not None:
        progress(len(configs), len(configs), f"done: {len(configs)} configurations")
    return Sweep(rows, False, len(configs))
