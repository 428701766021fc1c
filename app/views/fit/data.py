"""The sweep: trace the model at each batch size / sequence length (torch in the job process
only), measure eager reserved, roam and roam with recomputation, and cache every row (model,
configuration and planner settings), so a wider sweep re-uses what was measured."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence

from app.analysis.settings import PlanSettings
from app.core import state
from roam_core.base.errors import ConfigError
from roam_core.model.graph import Graph
from roam_core.model.parallel import ParallelSetting
from roam_core.planner.whatfits import FitRow

__all__ = ["MAX_CONFIGS", "MAX_CONFIGS_LARGE", "SMALL_MODELS", "sweep"]

#: Most configurations one sweep traces (teaching models) and for the larger zoo models.
MAX_CONFIGS, MAX_CONFIGS_LARGE = 12, 3


#: Zoo models that trace and plan in seconds on a CPU.
SMALL_MODELS = frozenset({"mlp", "tiny_gpt", "residual_block", "teach_order", "teach_updates",
                          "teach_layout", "teach_recompute"})


def _row_key(model: str, b: int, t: int | None, settings: PlanSettings,
             parallel: ParallelSetting) -> str:
    extra = [parallel.to_dict()] if parallel.active else []  # one-device keys unchanged
    blob = json.dumps([model, b, t, "steady", "adamw", settings.as_dict(), *extra],
                      sort_keys=True)
    return "fit-" + hashlib.sha256(blob.encode()).hexdigest()[:32]


def sweep(model: str, batch_sizes: Sequence[int], seq_lens: Sequence[int | None],
          settings: PlanSettings,
          progress: Callable[[int, int, str], None] | None = None,
          trace: Callable[[str, int, int | None], Graph] | None = None,
          parallel: ParallelSetting | None = None) -> list[FitRow]:
    """Measure every (batch, sequence length) of ``model`` (cached rows are re-used).

    ``trace(model, batch, seq_len)`` returns a graph (default: the zoo tracer, steady
    setting, AdamW; with ``parallel``, the step of one rank, so every row is per rank).

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
    cap = MAX_CONFIGS if model in SMALL_MODELS else MAX_CONFIGS_LARGE
    if len(configs) > cap:
        raise ConfigError(
            f"{model}: {len(configs)} configurations is too many for one sweep (at most {cap}"
            + ("" if model in SMALL_MODELS else
               "; each configuration of this model is traced and planned, which takes "
               "minutes on a CPU") + ")")
    par = parallel or ParallelSetting()
    if trace is None:
        def trace(m: str, b: int, t: int | None) -> Graph:
            from roam_core.zoo import trace_zoo

            return trace_zoo(m, b, t, "steady", "adamw", parallel=par).graph

    cfg = PlannerConfig(time_limit_s=settings.time_limit_s, node_limit=settings.node_limit,
                        workers=settings.workers, alignment_bytes=settings.alignment_bytes)
    rows: list[FitRow] = []
    for i, (b, t) in enumerate(configs):
        what = f"{model} batch {b}" + (f", seq {t}" if t else "")
        if progress is not None:
            progress(i, len(configs), f"{i}/{len(configs)}: tracing and planning {what}")
        key = _row_key(model, b, t, settings, par)
        cached = state.get_json(key)
        if cached is not None:
            rows.append(FitRow.from_dict(cached))
            continue
        graph = trace(model, b, t)
        row = fit_row(graph, cfg, batch_size=b, seq_len=t or graph.origin.get("seq_len"))
        state.put_json(key, row.to_dict())
        rows.append(row)
    if progress is not None:
        progress(len(configs), len(configs), f"done: {len(configs)} configurations")
    return rows
