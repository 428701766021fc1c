"""What fits, over many configurations: trace and measure each, locally or on a Dask cluster.

One configuration is a (batch size, sequence length) of a :class:`ModelSource` in a
precision, on one device or (``parallel``, a
:class:`~roam_core.model.parallel.ParallelSetting`) as the step of one data-parallel rank,
measured against the memory of that rank's device (``docs/parallel.md``);
:func:`fit_config` traces it (fake tensors) and measures it with
:func:`roam_core.planner.whatfits.fit_row` against the memory size.  :func:`fit_sweep` runs
many:

* **locally** (no executor): in increasing batch order per sequence length, and a sequence
  length stops at the first batch no method fits (bigger ones cannot fit either);
* **on an executor** (``roam fit --executor dask-local:N`` or ``dask://HOST:PORT``): every
  configuration is one task (trace and plan in the worker, which needs roam, torch and
  transformers installed), all submitted at once; the rows are then cut exactly where the
  local sweep would have stopped, so both give the same answer.

The sweep's arguments are plain data (the source, numbers, a ``PlannerConfig``, a
``ParallelSetting``), so they pickle to the workers.  ``roam fit --world-size W [W ...]``
runs one sweep per world size (:func:`roam_core.commands.fit.fit_dict`).
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Callable, Sequence
from typing import Any

from roam_core.model.parallel import ParallelSetting
from roam_core.planner.config import PlannerConfig
from roam_core.planner.whatfits import FitRow, fit_row
from roam_core.zoo.sources import ModelSource

__all__ = ["fit_config", "fit_sweep"]


def fit_config(source: ModelSource, batch_size: int, seq_len: int | None, *,
               memory_bytes: int | None, precision: str, attention: str | None,
               planner: PlannerConfig, executor: cf.Executor | None = None,
               parallel: ParallelSetting | None = None, merge_casts: bool = False) -> FitRow:
    """Trace one configuration (steady setting, AdamW; ``parallel``: the step of one rank)
    and measure it (a :class:`FitRow`).  ``merge_casts``: roam plans the step with
    autocast's repeated casts made once (:mod:`roam_core.trace.identical_casts`), eager's
    reserved memory stays that of the step as eager runs it (traced twice)."""
    graph = source.trace(batch_size, seq_len, precision=precision, attention=attention,
                         parallel=parallel).graph
    eager = None
    if merge_casts:
        eager, graph = graph, source.trace(batch_size, seq_len, precision=precision,
                                           attention=attention, parallel=parallel,
                                           merge_casts=True).graph
    return fit_row(graph, planner, batch_size=batch_size,
                   seq_len=graph.origin.get("seq_len") or seq_len,
                   memory_bytes=memory_bytes, executor=executor, eager_graph=eager)


def fit_sweep(source: ModelSource, batch_sizes: Sequence[int],
              seq_lens: Sequence[int | None], *, memory_bytes: int, precision: str,
              attention: str | None = None, planner: PlannerConfig | None = None,
              executor: cf.Executor | None = None,
              progress: Callable[[int, int, str], None] | None = None,
              parallel: ParallelSetting | None = None,
              merge_casts: bool = False) -> list[FitRow]:
    """Measure every (batch, sequence length); see the module notes for the two ways.

    Parameters
    ----------
    source : ModelSource
        The model.
    batch_sizes, seq_lens : sequence
        The configurations (``[None]`` for models without a sequence).
    memory_bytes : int
        The memory size the rows are measured against.
    precision, attention : str
        The step's precision and attention kernel.
    planner : PlannerConfig, optional
        Planner settings (default ``PlannerConfig(workers=1)``).
    executor : concurrent.futures.Executor, optional
        Run every configuration as a task on it (a Dask client's executor).
    progress : callable, optional
        ``progress(done, total, message)``.
    parallel : ParallelSetting, optional
        Every configuration is the step of one rank of this data-parallel world (batch
        sizes per rank; ``memory_bytes`` is one rank's device).
    merge_casts : bool
        roam's methods plan the step with autocast's repeated casts made once (see
        :func:`fit_config`).

    Returns
    -------
    list of FitRow
        In (sequence length, batch size) order.
    """
    cfg = planner or PlannerConfig(workers=1)
    batches = sorted(set(batch_sizes))
    lengths = list(seq_lens) or [None]
    total = len(batches) * len(lengths)
    kw: dict[str, Any] = {"memory_bytes": memory_bytes, "precision": precision,
                          "attention": attention, "planner": cfg, "parallel": parallel,
                          "merge_casts": merge_casts}
    if executor is not None:
        futs = {(t, b): executor.submit(fit_config, source, b, t, **kw)
                for t in lengths for b in batches}
        for i, f in enumerate(cf.as_completed(list(futs.values()))):
            f.result()  # an error of any configuration stops the sweep
            if progress is not None:
                progress(i + 1, total, f"{i + 1}/{total} configurations measured")
        rows = {k: f.result() for k, f in futs.items()}
        return [r for t in lengths for r in _until_nothing_fits(
            [rows[(t, b)] for b in batches], memory_bytes)]
    out: list[FitRow] = []
    done = 0
    for t in lengths:
        for b in batches:
            if progress is not None:
                progress(done, total, f"tracing and planning batch {b}"
                                      + (f", seq {t}" if t else ""))
            row = fit_config(source, b, t, **kw)
            out.append(row)
            done += 1
            if not any(row.fits(memory_bytes).values()):
                break
    if progress is not None:
        progress(total, total, f"done: {len(out)} configurations")
    return out


def _until_nothing_fits(rows: list[FitRow], memory_bytes: int) -> list[FitRow]:
    """The rows a local sweep keeps: up to and including the first that nothing fits."""
    kept = []
    for r in rows:
        kept.append(r)
        if not any(r.fits(memory_bytes).values()):
            break
    return kept
