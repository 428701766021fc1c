"""Independent checkers for orders and plans; they share no code with any solver.

Every checker returns a list of :class:`~roam_core.base.errors.Violation` (empty when valid) and
never raises on a bad plan.  The rules, one module per family:

1. (:mod:`~roam_core.oracle.validate.order_rules`) the order is a permutation of the graph's
   ops (``MISSING_OP``, ``DUPLICATE_OP``, ``UNKNOWN_OP``); every data edge runs forward
   (``PRECEDENCE``), every mutation hazard keeps its side (``MUTATION_ORDER``), random ops
   keep their relative order (``RNG_ORDER``), collectives keep theirs
   (``COLLECTIVE_ORDER``, from the op targets, whatever edges the graph holds);
2. (:mod:`~roam_core.oracle.validate.arena_rules`, :func:`check_arena`) every planned tensor
   has an aligned offset inside the arena and no two co-live tensors share bytes; the same
   rules for a DSA solution (:func:`check_dsa_solution`);
3. (:mod:`~roam_core.oracle.validate.recompute_rules`, :func:`check_recompute`) every
   recompute op re-runs a re-runnable op on the same inputs it read
   (``RECOMPUTE_MISMATCH``; random ops only when the tracer vouches that their draw is
   replayed), its inputs exist when it runs (``RECOMPUTE_INPUT``), and no op reads a
   dropped value before it is recomputed (``READ_DROPPED``);
4. (:mod:`~roam_core.oracle.validate.plan_rules`, :func:`check_plan`) a plan: its
   fingerprint, then the rules above; orders and layouts of plans with recomputation are
   checked on the expanded graph (:func:`roam_core.model.recompute_ops.expand_graph`).

The checkers read only :mod:`roam_core.model` and :mod:`roam_core.base`: where a storage is
live in an order is defined again here (:mod:`~roam_core.oracle.validate.steps`), not taken
from the simulator.
"""

from roam_core.oracle.validate.arena_rules import check_arena, check_dsa_solution
from roam_core.oracle.validate.order_rules import check_order
from roam_core.oracle.validate.plan_rules import check_plan
from roam_core.oracle.validate.recompute_rules import check_recompute

__all__ = ["check_arena", "check_dsa_solution", "check_order", "check_plan", "check_recompute"]
