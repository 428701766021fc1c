"""The steps of :func:`~roam_core.layout.arena_layout.plan_arena` and what they share.

:class:`ArenaStages` holds the problem, the candidate layouts by name, the winner so far,
every solver record and one :class:`~roam_core.model.stage_cost.StageCost` per step that
ran.  Each step is one function here (:data:`STEPS` lists them in the order they run);
:meth:`ArenaStages.run` runs one step under the value contract: a step runs only while the
lowest candidate is above ``target`` (the planned peak plus the contract's slack,
``ArenaConfig.good_enough_gap`` / ``good_enough_bytes``), and the cost records the seconds,
the arena bytes it gained, the work it did against its budget and why it stopped.

Budgets are counts of work, so the same problem gives the same layout on an idle or a loaded
machine: greedy passes (the promotion, the flip-compaction and the shake), search nodes (the
DSA candidate's exact search and the peak repair) and CP-SAT deterministic seconds (the
sub-task groups and the polish).  ``ArenaConfig.time_limit_s`` is only a safety limit, in
CPU seconds of the layout's thread (:mod:`roam_core.base.cpu_clock`), so a loaded machine
does not cut it sooner (``stopped == "time"`` when it, not the work, ended a step).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from roam_core.base.cancel import CancelToken, is_cancelled
from roam_core.base.cpu_clock import cpu_now
from roam_core.base.status import SolveStatus
from roam_core.layout.config import ArenaConfig
from roam_core.layout.dsa_heuristics import named_order, place_in_order, promote_high
from roam_core.layout.dsa_repair import repair_from_starts
from roam_core.layout.dsa_solver import solve_dsa
from roam_core.layout.flip_compact import flip_passes, shake_passes
from roam_core.layout.group_placement import polish_top_band
from roam_core.layout.subtask_layout import SubtaskTree, roam_candidate
from roam_core.model.dsa import Problem, Solution
from roam_core.model.graph import Graph, OpId
from roam_core.model.plan import SolveRecord
from roam_core.model.stage_cost import StageClock, StageCost, good_enough_bytes

__all__ = ["FIRST_ORDERS", "REPAIR_FRACTION", "REPAIR_STARTS",
           "RESTART_ORDERS", "STEPS", "ArenaStages", "StepTally"]

#: The first greedy passes (best fit): largest section first reaches the live-set bound on
#: most training steps (GPT-2 steady steps at 24-360 layers: the layout is that one pass);
#: greedy by size (TFLite / XLA) is the classic baseline the layout is never worse than,
#: run whenever the first is above the bound.
FIRST_ORDERS = ("total_length", "size")
#: Candidates (of distinct heights, lowest first) the repair starts from, searched
#: round-robin (:func:`~roam_core.layout.dsa_repair.repair_from_starts`).
REPAIR_STARTS = 2
#: The repair's widest window: the steps whose load is at least this fraction of the target
#: (narrowed until it holds ``search_max_buffers`` buffers).
REPAIR_FRACTION = 0.6
#: The promotion's restart orders (step 1b): chronological (by first use, larger first), the
#: order an allocator sees; tried when the promotion and the sub-task layouts end above the
#: contract.
RESTART_ORDERS = ("start",)
#: How many of the lowest candidates the shake starts from (each gets a share of its passes).
_SHAKE_STARTS = 3
#: Most flip-compaction passes per candidate.
_FLIP_PASSES = 8


@dataclass
class StepTally:
    """What a step reports to :meth:`ArenaStages.run`: its work, budget and stop reason."""

    unit: str = ""
    done: int = 0
    limit: int = 0
    stopped: str = ""


class ArenaStages:
    """The shared state of :func:`~roam_core.layout.arena_layout.plan_arena`'s steps."""

    def __init__(self, problem: Problem, config: ArenaConfig, cancel: CancelToken,
                 t0: float, resident_bytes: int) -> None:
        self.problem, self.config, self.cancel, self.t0 = problem, config, cancel, t0
        #: the safety limit, on this thread's CPU clock (:mod:`roam_core.base.cpu_clock`)
        self.deadline = cpu_now() + config.time_limit_s
        self.a = max(1, config.alignment_bytes)
        self.lb = problem.lower_bound()
        peak = resident_bytes + self.lb * self.a
        slack = good_enough_bytes(peak, config.good_enough_gap, config.good_enough_bytes)
        #: the value contract: a layout at or below this height is good enough
        self.target = self.lb + slack // self.a
        self.candidates: dict[str, Solution] = {}
        self.passes: dict[str, Solution] = {}  # the greedy passes of step 0
        self.records: list[SolveRecord] = []
        self.costs: list[StageCost] = []
        self.method = ""
        self.sol = Solution((), 0)
        self.promoted = ""  # the order step 0b promoted from

    # ------------------------------------------------------------------ state
    def lowest(self) -> int:
        """The height of the lowest candidate."""
        return min(c.height for c in self.candidates.values())

    def good_enough(self) -> bool:
        """Whether the lowest candidate is within the value contract."""
        return self.lowest() <= self.target

    def cancelled(self) -> bool:
        """Whether the caller cancelled (the polishing steps are then skipped)."""
        return is_cancelled(self.cancel)

    def late(self) -> bool:
        """Whether the CPU-time safety limit has passed."""
        return cpu_now() > self.deadline

    def pick(self) -> None:
        """The winner: the lowest candidate (the task tree's among equals)."""
        self.method = min(self.candidates,
                          key=lambda k: (self.candidates[k].height, k != "roam", k))
        self.sol = self.candidates[self.method]

    def by_height(self) -> list[str]:
        """Candidate names, lowest first (the winner first among equals, then by name)."""
        return sorted(self.candidates,
                      key=lambda k: (self.candidates[k].height, k != self.method, k))

    def record(self, stage: str, task_id: str, height: int | None, started: float,
               size: int) -> None:
        """A heuristic step's solver record, heights scaled to bytes."""
        self.records.append(SolveRecord(stage, task_id, SolveStatus.HEURISTIC,
                                        None if height is None else height * self.a,
                                        self.lb * self.a, time.perf_counter() - started, size))

    # ------------------------------------------------------------------- runs
    def run(self, name: str, step: Callable[[ArenaStages, StepTally], None]) -> None:
        """Run ``step`` and record its cost as ``layout.<name>``."""
        clock = StageClock()
        before = self.lowest() if self.candidates else None
        tally = StepTally()
        step(self, tally)
        self.pick()
        after = self.lowest()
        stopped = tally.stopped
        if not stopped:
            stopped = ("at_bound" if after <= self.lb else "good_enough"
                       if after <= self.target else "cancelled" if self.cancelled()
                       else "time" if self.late() else "done")
        gained = 0 if before is None else (before - after) * self.a
        self.costs.append(clock.cost(f"layout.{name}", gained, tally.done, tally.limit,
                                     tally.unit, stopped))


# ------------------------------------------------------------------- steps
def first_passes(st: ArenaStages, tally: StepTally) -> None:
    """Step 0: the first greedy passes: largest section first, then (unless that one is at
    the bound) greedy by size; both are candidates, and both go to the DSA portfolio as
    passes it has run."""
    problem = st.problem
    tally.unit = "passes"
    for oname in FIRST_ORDERS:
        if st.passes and min(c.height for c in st.passes.values()) <= st.lb:
            break  # nothing can be lower
        t = time.perf_counter()
        sol = place_in_order(problem, named_order(problem, oname), "best")
        assert sol is not None
        st.passes[f"greedy:{oname}:best"] = sol
        tally.done += 1
        st.record("layout", "greedy" if oname == "size" else f"greedy:{oname}", sol.height,
                  t, len(problem))
    st.candidates.update(st.passes)


def _above(problem: Problem, sol: Solution, target: int) -> int:
    """How many buffers of ``sol`` reach above ``target``."""
    return sum(o + b.size > target for o, b in zip(sol.offsets, problem.buffers))


def promote(st: ArenaStages, tally: StepTally) -> None:
    """Step 0b: iterated greedy from the first pass with the fewest buffers above the
    contract: those buffers move to the front of the pass's order and everything is placed
    again (:func:`~roam_core.layout.dsa_heuristics.promote_high`), at most
    ``promote_passes`` times.

    A first pass is usually wrong at a few buffers placed late, when the gaps left at their
    steps were all too small (Llama-style steps: the LM head's AdamW temporaries, three
    64 MiB buffers at a second peak 7,000 steps after the first, end on top of long-lived
    buffers the first peak put in their way); with them in front they take the bottom and
    the rest packs around them.
    """
    problem, cfg = st.problem, st.config
    tally.unit, tally.limit = "passes", cfg.promote_passes
    name = min(st.passes, key=lambda k: (_above(problem, st.passes[k], st.target),
                                         st.passes[k].height, k))
    oname = name.split(":")[1]
    st.promoted = oname
    t = time.perf_counter()
    sol, runs, cut = promote_high(problem, named_order(problem, oname), "best", st.passes[name],
                                  target=st.target, passes=cfg.promote_passes,
                                  deadline=st.deadline)
    tally.done = runs
    tally.stopped = "time" if cut else ""
    st.record("layout", f"promote:{oname}", sol.height, t, runs * len(problem))
    if sol.height < st.passes[name].height:
        st.candidates[f"promote:{oname}:best"] = sol


def restart(st: ArenaStages, tally: StepTally) -> None:
    """Step 1b: the promotion again from each order of :data:`RESTART_ORDERS` (a first pass
    and ``promote_passes`` promotions each), stopped at the contract.

    The promotion from the first passes can settle in a cycle of layouts a little above the
    contract that the later greedy steps (flip, shake) do not leave either; a run from
    another order escapes it (``docs/planning_time.md``: the MoE case).
    """
    problem, cfg = st.problem, st.config
    tally.unit = "passes"
    for oname in RESTART_ORDERS:
        if st.lowest() <= st.target or st.late():
            break
        if oname == st.promoted:
            continue
        t = time.perf_counter()
        order = named_order(problem, oname)
        tally.limit += 1 + cfg.promote_passes
        start = place_in_order(problem, order, "best", st.deadline)
        if start is None:
            tally.stopped = "time"
            break
        st.candidates[f"greedy:{oname}:best"] = start
        sol, done, cut = promote_high(problem, order, "best", start, target=st.target,
                                      passes=cfg.promote_passes, deadline=st.deadline)
        tally.done += 1 + done
        tally.stopped = "time" if cut else ""
        st.record("layout", f"promote:{oname}", sol.height, t, (1 + done) * len(problem))
        if sol.height < start.height:
            st.candidates[f"promote:{oname}:best"] = sol


def make_roam(graph: Graph, order: Sequence[OpId], task_tree: SubtaskTree | None
              ) -> Callable[[ArenaStages, StepTally], None]:
    """Steps 1-3 (:func:`~roam_core.layout.subtask_layout.roam_candidate`): the activation
    stack and the CP-SAT sub-task groups, each group cut by ``task_time_limit_s``
    deterministic seconds."""

    def roam(st: ArenaStages, tally: StepTally) -> None:
        sol, recs = roam_candidate(graph, order, st.problem, task_tree, st.config,
                                   st.deadline, st.cancel)
        st.candidates["roam"] = sol
        st.records.extend(_scale(r, st.a) for r in recs)
        tally.unit = "solves"
        tally.done = sum(r.status in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE,
                                      SolveStatus.HINT) and r.wall_time_s > 0
                         and r.task_id not in ("activations", "global") for r in recs)

    return roam


def dsa(st: ArenaStages, tally: StepTally) -> None:
    """Step 4: the DSA portfolio on the whole problem (handed the greedy passes of step 0),
    and its exact search when the problem is small enough (``search_max_buffers``,
    ``search_max_cells``), cut by ``search_nodes`` search nodes and stopped at the
    contract."""
    cfg = st.config
    t = time.perf_counter()
    res = solve_dsa(st.problem, time_limit_s=max(0.1, st.deadline - cpu_now()),
                    cancel=st.cancel, exact=cfg.dsa_exact, work_limit=cfg.search_nodes,
                    known=st.passes, good_enough=st.target,
                    max_search_buffers=cfg.search_max_buffers,
                    max_search_cells=cfg.search_max_cells)
    assert res.solution is not None
    st.candidates[res.method] = res.solution
    tally.unit, tally.done, tally.limit = "nodes", res.nodes, cfg.search_nodes
    tally.stopped = {"work": "work", "time": "time", "cancel": "cancelled"}.get(
        res.stopped_by, "")
    st.records.append(SolveRecord("layout", "dsa", res.status, res.solution.height * st.a,
                                  res.lower_bound * st.a, time.perf_counter() - t,
                                  len(st.problem)))


def flip(st: ArenaStages, tally: StepTally) -> None:
    """Step 5: flip-compact every candidate, lowest first, until one is within the contract
    (a lower result is a new candidate); at most 8 passes a candidate."""
    t = time.perf_counter()
    tally.unit = "passes"
    for name in st.by_height():
        if st.lowest() <= st.target or st.late():
            break
        cand = st.candidates[name]
        tally.limit += _FLIP_PASSES
        flipped, runs = flip_passes(st.problem, cand, st.deadline, _FLIP_PASSES, st.target)
        tally.done += runs
        if flipped.height < cand.height:
            st.candidates[f"{name}+flip"] = flipped
    st.record("merge", "flip", st.lowest(), t, len(st.problem))


def peak_repair(st: ArenaStages, tally: StepTally) -> None:
    """Step 5: the peak repair of the lowest candidates of distinct heights to within the
    contract, their window searches round-robin under ``search_nodes`` nodes
    (:func:`~roam_core.layout.dsa_repair.repair_from_starts`; windows narrowed to
    ``search_max_buffers``).  Which start repairs well varies (efficientnet_b0 b1: only the
    flipped greedy layout, not the lowest)."""
    names: list[str] = []
    for name in st.by_height():
        if len(names) < REPAIR_STARTS and st.candidates[name].height not in {
                st.candidates[n].height for n in names}:
            names.append(name)
    cfg = st.config
    t = time.perf_counter()
    sol, nodes, how, k = repair_from_starts(
        st.problem, [st.candidates[n] for n in names], st.target,
        node_budget=cfg.search_nodes, deadline=st.deadline, cancel=st.cancel,
        fraction=REPAIR_FRACTION, max_buffers=cfg.search_max_buffers,
        max_cells=cfg.search_max_cells)
    tally.unit, tally.done, tally.limit = "nodes", nodes, cfg.search_nodes
    st.record("merge", "repair", None if sol is None else sol.height, t, nodes)
    if sol is not None:
        st.candidates[f"{names[k]}+{how}"] = sol
    elif nodes >= cfg.search_nodes:
        tally.stopped = "work"


def shake(st: ArenaStages, tally: StepTally) -> None:
    """Step 5: shake the lowest few candidates (seeded), ``shake_rounds`` greedy passes
    shared among them, stopped at the contract."""
    t = time.perf_counter()
    cfg = st.config
    tally.unit, tally.limit = "passes", cfg.shake_rounds
    starts = st.by_height()[:_SHAKE_STARTS]
    for k, name in enumerate(starts):
        left = cfg.shake_rounds - tally.done
        if st.lowest() <= st.target or left <= 0 or st.late():
            break
        sol, runs = shake_passes(st.problem, st.candidates[name], st.deadline, cfg.seed + k,
                                 left // (len(starts) - k), target=st.target)
        tally.done += runs
        if sol.height < st.candidates[name].height:
            st.candidates[f"{name}+shake"] = sol
    st.record("merge", "shake", st.lowest(), t, len(st.problem))


def polish(st: ArenaStages, tally: StepTally) -> None:
    """Step 6: lower the top band of the winner with CP-SAT (``polish_rounds`` rounds of
    ``task_time_limit_s`` deterministic seconds), then flip-compact it once more."""
    st.pick()
    polished, recs = polish_top_band(st.problem, st.sol, st.target, st.config, st.deadline,
                                     st.cancel)
    st.records.extend(_scale(r, st.a) for r in recs)
    tally.unit, tally.done, tally.limit = "solves", len(recs), st.config.polish_rounds
    if polished.height < st.sol.height:
        name = f"{st.method}+polish"
        st.candidates[name] = polished
        if st.config.flip_compact and polished.height > st.target:
            flipped, _ = flip_passes(st.problem, polished, st.deadline, _FLIP_PASSES,
                                     st.target)
            if flipped.height < polished.height:
                st.candidates[f"{name}+flip"] = flipped


def _scale(r: SolveRecord, a: int) -> SolveRecord:
    return SolveRecord(r.stage, r.task_id, r.status,
                       None if r.objective is None else r.objective * a,
                       None if r.best_bound is None else r.best_bound * a, r.wall_time_s,
                       r.size)


@dataclass(frozen=True)
class Step:
    """One polishing step of :data:`STEPS`: its name and whether a config turns it on."""

    name: str
    on: Callable[[ArenaConfig], bool]
    run: Callable[[ArenaStages, StepTally], None] | None = field(default=None)


#: The polishing steps after the first passes, in the order they run (``roam`` is built per
#: call: it needs the graph, the order and the task tree).
STEPS: tuple[Step, ...] = (
    Step("promote", lambda c: c.promote_passes > 0, promote),
    Step("roam", lambda c: c.use_cpsat),
    Step("restart", lambda c: c.promote_passes > 0, restart),
    Step("dsa", lambda c: c.use_dsa, dsa),
    Step("flip", lambda c: c.flip_compact, flip),
    Step("repair", lambda c: c.peak_repair and c.use_dsa and c.dsa_exact, peak_repair),
    Step("shake", lambda c: c.flip_compact and c.shake_rounds > 0, shake),
    Step("polish", lambda c: c.use_cpsat and c.polish_rounds > 0, polish),
)
