"""Settings of the arena layout (:func:`roam_core.layout.arena_layout.plan_arena`).

Examples
--------
>>> ArenaConfig(alignment_bytes=256).alignment_bytes
256
"""

from __future__ import annotations

from dataclasses import dataclass

from roam_core.base.checks import at_least as _at_least

__all__ = ["ArenaConfig"]


@dataclass(frozen=True, slots=True)
class ArenaConfig:
    """Settings of the arena layout (:func:`roam_core.layout.arena_layout.plan_arena`).

    Inside a :class:`PlannerConfig` (its ``arena`` field), ``alignment_bytes``, ``time_limit_s``
    and ``seed`` always follow the planner's ``alignment_bytes``, ``layout_time_limit_s`` and
    ``order.random_seed`` (set those there; the planner also caps the layout budget by what
    ``PlannerConfig.time_limit_s`` leaves).

    Parameters
    ----------
    alignment_bytes : int
        Offset and size granularity (512 like CUDA's caching allocator).
    time_limit_s : float
        Budget of the whole layout (portfolio and sub-task models together).
    task_time_limit_s : float
        CP-SAT limit per sub-task group.
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
        Rounds of randomised flip-compaction on the winner (step 5; 0 = off).
    peak_repair : bool
        Re-place the buffers around the load peak of the winner with the exact DSA search
        (step 5; needs ``use_dsa`` and ``dsa_exact``).
    num_workers : int
        CP-SAT workers.
    seed : int
        CP-SAT random seed.
    """

    alignment_bytes: int = 512
    time_limit_s: float = 60.0
    task_time_limit_s: float = 5.0
    use_cpsat: bool = True
    max_group_tensors: int = 150
    use_dsa: bool = True
    dsa_exact: bool = True
    flip_compact: bool = True
    shake_rounds: int = 60
    peak_repair: bool = True
    num_workers: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        _at_least("arena.alignment_bytes", self.alignment_bytes, 1)
        _at_least("arena.time_limit_s", self.time_limit_s, 0.0)
        _at_least("arena.task_time_limit_s", self.task_time_limit_s, 0.0)
        _at_least("arena.max_group_tensors", self.max_group_tensors, 1)
        _at_least("arena.shake_rounds", self.shake_rounds, 0)
        _at_least("arena.num_workers", self.num_workers, 1)
