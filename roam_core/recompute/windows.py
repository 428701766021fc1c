"""Exact refinement of a drop set by windows: CP-SAT over a few candidates, the rest fixed.

The greedy trajectory, its pruning, the swaps and the portfolio
(:mod:`~roam_core.recompute.greedy`, :mod:`~roam_core.recompute.improve`) give a drop set
``D`` whose just-in-time peak fits a limit.  :func:`refine_windows` improves it by windows:
it takes a sub-problem of at most ``window_size`` candidate storages ``W`` (one of ``D``'s
costliest drops, the other drops and the cheapest undropped storages live at the steps where
keeping it again would overflow), fixes every other decision, and solves exactly with CP-SAT
which storages of ``W`` to drop (:mod:`~roam_core.recompute.window_model`), minimising the
added cost (the evaluator's objective, estimated time by default) subject to the limit at
every step the window affects.  A window's solution is kept only when
:class:`~roam_core.recompute.evaluator.JitEvaluator` confirms that it fits and costs less;
windows are tried until none improves or ``max_windows`` models were solved; the report says
which (:attr:`WindowReport.stopped`) and :meth:`WindowReport.stage_cost` is the plan's
``recompute.windows`` stage.

The models are built and solved in the calling process, with one worker, a fixed seed and
a deterministic time limit, so the result is reproducible.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from roam_core.base.errors import GraphError
from roam_core.model.graph import TensorId
from roam_core.model.stage_cost import StageCost
from roam_core.recompute.evaluator import Evaluation, JitEvaluator
from roam_core.recompute.window_model import (
    build_window_model,
    jit_accounting,
    solve_window_model,
)

__all__ = ["DEFAULT_WINDOW_SIZE", "WindowReport", "refine_windows"]

#: storages in one window (the CP-SAT model's drop decisions)
DEFAULT_WINDOW_SIZE = 12


@dataclass(frozen=True, slots=True)
class WindowReport:
    """What :func:`refine_windows` did.

    Parameters
    ----------
    windows : int
        Models solved.
    improved : int
        Windows whose solution was kept (confirmed by the evaluator).
    start_cost, end_cost : float
        The objective (the evaluator's re-run costs) before and after.
    start_flops, end_flops : int
        Extra FLOPs before and after.
    cpu_s : float
        CPU seconds spent (``time.process_time``).
    max_windows : int
        The budget: models solved at most.
    stopped : str
        Why the refinement ended (a ``StageCost`` reason): ``"done"`` (a whole round of
        windows improved nothing), ``"work"`` (``max_windows`` models solved) or
        ``"skipped"`` (the drop set did not fit, dropped nothing, or no windows allowed).
    wall_s : float
        Wall seconds spent.
    """

    windows: int
    improved: int
    start_cost: float
    end_cost: float
    start_flops: int
    end_flops: int
    cpu_s: float
    max_windows: int = 0
    stopped: str = "done"
    wall_s: float = 0.0

    def stage_cost(self) -> StageCost:
        """The ``recompute.windows`` stage: seconds, models solved against the budget and
        why it stopped (it lowers the cost of the recomputation, not bytes)."""
        return StageCost("recompute.windows", self.wall_s, self.cpu_s, 0, self.windows,
                         self.max_windows, "solves", self.stopped)

    def note(self, step_flops: int) -> str:
        """One line for the plan notes."""
        sf = max(step_flops, 1)
        return (f"exact windows: {self.windows} CP-SAT windows, {self.improved} improved the "
                f"drop set: extra FLOPs +{100 * self.start_flops / sf:.2f}% -> "
                f"+{100 * self.end_flops / sf:.2f}%, cost {self.start_cost:.4g} -> "
                f"{self.end_cost:.4g} ({self.cpu_s:.1f} CPU s, {self.stopped})")


def _feasible(ev: JitEvaluator, drops: Iterable[TensorId]) -> bool:
    try:
        ev.recompute_ops(tuple(sorted(set(drops))))
    except GraphError:
        return False
    return True


class _WindowChooser:
    """Windows around the costliest drops of one drop set.

    For a dropped storage ``x``, the steps where keeping it again would overflow (its bytes
    over the slack left at the steps between its last forward reader and its last reader)
    are to be covered: the window is ``x``, the costliest other drops that free bytes there
    (they may be swapped too) and undropped storages picked greedily by the overflow they
    cover per unit of re-run cost, until the overflow is covered or the window is full.
    """

    def __init__(self, ev: JitEvaluator, cur: Evaluation, cap: int, size: int,
                 pool: Sequence[TensorId], own: dict[TensorId, float]) -> None:
        ix = ev.index
        self.ev, self.cap, self.size, self.own = ev, cap, size, own
        assert cur.positions is not None
        assert cur.live is not None
        self.base_live = np.asarray(cur.live)[cur.positions.base_steps]
        self.dset = set(cur.dropped)
        tix = ix.index_of
        self.costly = sorted((s for s in cur.dropped if own.get(s, 0.0) > 0 and s in tix),
                             key=lambda s: (-own[s], s))
        self.fresh = [s for s in pool if s not in self.dset and s in tix]
        tprod, late = ix.tensor_producer, ev.late
        self.held = {t for t in ev.planned if t not in ev.outputs and tprod[t] is not None
                     and ev.blockers[tprod[t]] is None  # type: ignore[index]  # not None above
                     and not any(r in late for r in ev.readers[t])}
        fr = [self.region(s) for s in self.fresh]
        self.fa = np.asarray([r[0] for r in fr], dtype=np.int64)
        self.fb = np.asarray([r[1] for r in fr], dtype=np.int64)
        self.fz = np.asarray([int(ix.size_bytes[tix[s]]) for s in self.fresh], dtype=np.int64)
        self.fc = np.asarray([own[s] + ev.costs.epsilon for s in self.fresh],
                             dtype=np.float64)

    def region(self, s: TensorId) -> tuple[int, int]:
        """Steps where dropping ``s`` frees its bytes: after its last forward reader, before
        its first late reader (its copy is made just before that)."""
        ix = self.ev.index
        j = ix.index_of[s]
        fl = int(ix.first_late_step[j])
        return int(ix.early_end_step[j]) + 1, (fl - 1 if fl >= 0 else int(ix.end_step[j]))

    def windows(self) -> Iterator[tuple[TensorId, list[TensorId]]]:
        """``(x, window)`` for each costliest drop ``x`` whose keeping again overflows."""
        ix = self.ev.index
        for x in self.costly:
            a, b = self.region(x)
            if a > b:
                continue
            deficit = np.zeros(len(self.base_live), dtype=np.int64)
            z = int(ix.size_bytes[ix.index_of[x]])
            deficit[a:b + 1] = np.maximum(self.base_live[a:b + 1] + z - self.cap, 0)
            if not deficit.any():
                continue  # keeping x again fits: pruning's job
            cum = np.concatenate(([0], np.cumsum(deficit > 0)))
            others: list[TensorId] = []
            for y in self.costly:
                if y == x or len(others) >= max(1, self.size // 4):
                    continue
                ya, yb = self.region(y)
                if ya <= yb and cum[yb + 1] - cum[ya] > 0:
                    others.append(y)
            win = [x, *others]
            if len(self.fresh):
                self._cover(win, deficit, cum)
            yield x, win

    def _cover(self, win: list[TensorId], deficit: np.ndarray, cum: np.ndarray) -> None:
        """Fill ``win`` with undropped storages: first those that cover what is left of the
        overflow, then the best others."""
        fa, fb, fz, size, n = self.fa, self.fb, self.fz, self.size, len(self.base_live)
        cover = cum[np.minimum(fb, n - 1) + 1] - cum[np.minimum(fa, n)]
        cover = np.where(fa <= fb, cover, 0)
        score = fz * cover / self.fc
        idx = [k for k in np.argsort(-score, kind="stable")[:8 * size] if cover[k] > 0]
        later: list[int] = []
        for k in idx:
            if len(win) >= size:
                break
            sa, sb = int(fa[k]), int(fb[k])
            if not deficit[sa:sb + 1].any():
                later.append(k)
                continue
            if self._add(win, self.fresh[k]):
                deficit[sa:sb + 1] = np.maximum(deficit[sa:sb + 1] - int(fz[k]), 0)
        for k in later:
            if len(win) >= size:
                break
            self._add(win, self.fresh[k])

    def _add(self, win: list[TensorId], s: TensorId) -> bool:
        """Add ``s`` and the storages its re-run would hold (forward intermediates no late
        op reads: dropped too, they are rebuilt by a chain instead of held)."""
        ev, dset = self.ev, self.dset
        if not _feasible(ev, [*dset, *win, s]):
            return False
        win.append(s)
        p = ev.index.tensor_producer[s]
        for _, su in ev.index.op_inputs[p] if p is not None else ():
            if (len(win) < self.size + 2 and su in self.held and su not in dset
                    and su not in win and _feasible(ev, [*dset, *win, su])):
                win.append(su)
        return True


def refine_windows(ev: JitEvaluator, start: Evaluation, limit_bytes: int, *,
                   window_size: int = DEFAULT_WINDOW_SIZE,
                   max_windows: int = 16, time_limit_s: float = 1.0
                   ) -> tuple[Evaluation, WindowReport]:
    """Improve a drop set that fits ``limit_bytes`` by exact windows (module docstring).

    Parameters
    ----------
    ev : JitEvaluator
        The evaluator of the graph and base order.
    start : Evaluation
        A drop set whose just-in-time peak fits (returned unchanged otherwise).
    limit_bytes : int
        The just-in-time peak to stay at or under (resident included).
    window_size : int
        Storages per window.
    max_windows : int
        Models solved at most (the deterministic work limit, with ``time_limit_s``).
    time_limit_s : float
        CP-SAT deterministic seconds per window.

    Returns
    -------
    (Evaluation, WindowReport)
        A drop set that fits and costs at most ``start``'s, and what was done.
    """
    t0, w0 = time.process_time(), time.perf_counter()
    cur = start
    solved = improved = 0
    if start.peak_bytes > limit_bytes or not start.dropped or max_windows <= 0:
        return cur, WindowReport(0, 0, start.extra_cost, start.extra_cost, start.extra_flops,
                                 start.extra_flops, time.process_time() - t0, max_windows,
                                 "skipped", time.perf_counter() - w0)
    own = {s: ev.producer_cost(s) for s in ev.droppable if ev.size[s]}
    for s in start.dropped:
        own.setdefault(s, ev.producer_cost(s))
    pool = [s for s in ev.droppable if ev.size[s]]
    cap = limit_bytes - ev.resident
    tried: set[tuple[frozenset[TensorId], frozenset[TensorId]]] = set()
    progress, cut = True, False
    while progress and solved < max_windows:
        progress = False
        acc = jit_accounting(ev, cur.dropped)
        for _x, win in _WindowChooser(ev, cur, cap, window_size, pool, own).windows():
            if solved >= max_windows:
                cut = True  # windows left untried
                break
            key = (frozenset(win), frozenset(cur.dropped))
            if key in tried:
                continue
            tried.add(key)
            try:
                wm = build_window_model(ev, cur.dropped, win, limit_bytes, current=acc)
            except GraphError:
                continue
            solved += 1
            new = solve_window_model(wm, time_limit_s=time_limit_s)
            if new is None or frozenset(new) == frozenset(cur.dropped):
                continue
            e = ev.evaluate(sorted(new))
            if e.peak_bytes <= limit_bytes and e.extra_cost < cur.extra_cost * (1 - 1e-9):
                cur = e
                improved += 1
                progress = True
                break  # windows are chosen again around the new drop set
    # the loop ends with a round that improved nothing, or with the budget spent (after an
    # improvement, or with windows of the round left untried)
    return cur, WindowReport(solved, improved, start.extra_cost, cur.extra_cost,
                             start.extra_flops, cur.extra_flops, time.process_time() - t0,
                             max_windows, "work" if progress or cut else "done",
                             time.perf_counter() - w0)
