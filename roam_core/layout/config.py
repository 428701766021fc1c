"""Settings of the arena layout (:func:`roam_core.layout.arena_layout.plan_arena`).

Examples
--------
>>> ArenaConfig(alignment_bytes=256).alignment_bytes
256
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from roam_core.base.checks import at_least as _at_least

__all__ = ["ArenaConfig"]


@dataclass(frozen=True, slots=True)
class ArenaConfig:
    """Settings of the arena layout (:func:`roam_core.layout.arena_layout.plan_arena`).

    Inside a :class:`PlannerConfig` (its ``arena`` field), ``alignment_bytes``, ``time_limit_s``,
    ``seed``, ``good_enough_gap`` and ``good_enough_bytes`` always follow the planner's
    ``alignment_bytes``, ``layout_time_limit_s``, ``order.random_seed``, ``good_enough_gap``
    and ``good_enough_bytes`` (set those there; the planner also caps the layout budget by
    what ``PlannerConfig.time_limit_s`` leaves).

    Every stage after the first greedy passes only polishes: it is skipped, or stops, once
    the arena is within the value contract of the planned peak (``max(good_enough_gap x
    peak, good_enough_bytes)``, ``docs/planning_time.md``), and its budget is a count of
    work (greedy passes, search nodes, CP-SAT deterministic seconds), so the layout does not
    depend on the machine's load; ``time_limit_s`` is only a safety limit, counted in CPU
    seconds of the layout's thread (:mod:`roam_core.base.cpu_clock`), so a loaded machine
    does not cut the layout sooner (it used to be wall-clock seconds; the field keeps its
    name and its saved values load unchanged).

    Parameters
    ----------
    alignment_bytes : int
        Offset and size granularity (512 like CUDA's caching allocator).
    time_limit_s : float
        Safety limit of the whole layout, in CPU seconds of the calling thread (the stages
        are cut by work first).
    task_time_limit_s : float
        CP-SAT deterministic seconds per sub-task group (step 2) and per top-band round of
        the polish.
    use_cpsat : bool
        Run the activation-stack + CP-SAT candidate (steps 1-3).
    max_group_tensors : int
        Groups larger than this are cut into chronological chunks for CP-SAT.
    use_dsa : bool
        Run the DSA portfolio candidate (step 4).
    dsa_exact : bool
        Let the DSA candidate run its canonical search (else greedy orders only).
    flip_compact : bool
        Mirror-and-compact every candidate (step 5, cheap) before the polish.
    shake_rounds : int
        Greedy passes (promotions and their flip-compactions together) of the shake, the
        randomised flip-compaction of the lowest candidates (step 5; 0 = off).
    peak_repair : bool
        Re-place the buffers around the load peak of the winner with the exact DSA search
        (step 5; needs ``use_dsa`` and ``dsa_exact``).
    promote_passes : int
        Iterated greedy passes after the first ones (step 0b): the buffers that ended above
        the contract moved to the front of the pass's order (0 = off).
    search_nodes : int
        Search nodes of the DSA candidate's exact search (step 4), and of the peak repair.
    search_max_buffers : int
        The exact search (step 4) and the repair windows take at most this many buffers
        (the search's set-up is quadratic).
    search_max_cells : int
        ... and at most this many cells, free buffers x sections: a node scans the
        sections of what it moves and the section tables hold buffers x sections entries,
        so a node costs about 0.1 us per cell (a 40-layer Llama-style step, 20 M cells:
        2 ms a node).
    polish_rounds : int
        CP-SAT top-band rounds of the polish (step 6).
    num_workers : int
        CP-SAT workers.
    seed : int
        CP-SAT random seed.
    good_enough_gap, good_enough_bytes : float, int
        The value contract: the polishing stages stop once the arena is within
        ``max(good_enough_gap x planned peak, good_enough_bytes)`` of the planned peak.
    """

    alignment_bytes: int = 512
    time_limit_s: float = 60.0
    task_time_limit_s: float = 0.5
    use_cpsat: bool = True
    max_group_tensors: int = 150
    use_dsa: bool = True
    dsa_exact: bool = True
    flip_compact: bool = True
    shake_rounds: int = 16
    peak_repair: bool = True
    num_workers: int = 1
    seed: int = 0
    promote_passes: int = 8
    search_nodes: int = 10_000
    search_max_buffers: int = 6000
    search_max_cells: int = 4_000_000
    polish_rounds: int = 6
    good_enough_gap: float = 1e-4
    good_enough_bytes: int = 64 * 1024

    def with_effort(self, factor: float) -> ArenaConfig:
        """These settings with every stage on and ``factor`` times the work.

        Each work budget (promotion and shake passes, search nodes, CP-SAT deterministic
        seconds and polish rounds) and the safety limit become ``factor`` times the larger of
        this config's and the default's, so a layout made with cut-down limits gets at
        least ``factor`` times the default effort.  The per-node cost caps
        (``search_max_buffers``, ``search_max_cells``) stay.

        Parameters
        ----------
        factor : float
            At least 1.

        Returns
        -------
        ArenaConfig

        Examples
        --------
        >>> ArenaConfig(shake_rounds=0, use_dsa=False).with_effort(2).shake_rounds
        32
        """
        _at_least("layout effort factor", factor, 1.0)
        d = ArenaConfig()

        def more(mine: float, default: float) -> float:
            return factor * max(mine, default)

        return replace(
            self, use_cpsat=True, use_dsa=True, dsa_exact=True, flip_compact=True,
            peak_repair=True,
            time_limit_s=more(self.time_limit_s, d.time_limit_s),
            task_time_limit_s=more(self.task_time_limit_s, d.task_time_limit_s),
            shake_rounds=round(more(self.shake_rounds, d.shake_rounds)),
            promote_passes=round(more(self.promote_passes, d.promote_passes)),
            search_nodes=round(more(self.search_nodes, d.search_nodes)),
            polish_rounds=round(more(self.polish_rounds, d.polish_rounds)))

    def __post_init__(self) -> None:
        _at_least("arena.alignment_bytes", self.alignment_bytes, 1)
        _at_least("arena.time_limit_s", self.time_limit_s, 0.0)
        _at_least("arena.task_time_limit_s", self.task_time_limit_s, 0.0)
        _at_least("arena.max_group_tensors", self.max_group_tensors, 1)
        _at_least("arena.shake_rounds", self.shake_rounds, 0)
        _at_least("arena.num_workers", self.num_workers, 1)
        _at_least("arena.promote_passes", self.promote_passes, 0)
        _at_least("arena.search_nodes", self.search_nodes, 0)
        _at_least("arena.search_max_buffers", self.search_max_buffers, 0)
        _at_least("arena.search_max_cells", self.search_max_cells, 0)
        _at_least("arena.polish_rounds", self.polish_rounds, 0)
        _at_least("arena.good_enough_gap", self.good_enough_gap, 0.0)
        _at_least("arena.good_enough_bytes", self.good_enough_bytes, 0)
