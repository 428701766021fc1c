"""Lower bounds on the peak memory of every valid order of a graph, one module per family.

* :mod:`~roam_core.oracle.bounds.live_set`: what one op forces (the live-set bound) and the
  exact bound of one small group (the update-group bound);
* :mod:`~roam_core.oracle.bounds.masks`: the restriction argument (any op subset bounds every
  order) and the storage masks it reads;
* :mod:`~roam_core.oracle.bounds.restriction`: CP-SAT over a group (a window of an order);
* :mod:`~roam_core.oracle.bounds.op_groups`: the small op groups the exact bounds solve;
* :mod:`~roam_core.oracle.bounds.choice`: the cheapest choice of every group at each op;
* :mod:`~roam_core.oracle.bounds.chain`: a chain of comparable ops plus one group, exactly.
"""

from roam_core.oracle.bounds.chain import (
    ChainGroupBound,
    chain_group_lower_bound,
    greedy_chain,
    heavy_path,
    peak_window_chain_bound,
)
from roam_core.oracle.bounds.choice import ChoiceBound, choice_lower_bound
from roam_core.oracle.bounds.live_set import (
    MAX_GROUP_STATES,
    GroupBound,
    LowerBound,
    best_lower_bound,
    forced_live_masks,
    group_lower_bound,
    live_set_lower_bound,
    optimizer_groups,
    update_group_lower_bound,
    weighted_mask_sum,
)
from roam_core.oracle.bounds.masks import StorageMasks, storage_masks
from roam_core.oracle.bounds.op_groups import forward_value_groups, free_branch_groups
from roam_core.oracle.bounds.restriction import (
    RestrictionBound,
    peak_window_groups,
    restriction_bound,
    window_bound,
)

__all__ = [
    "MAX_GROUP_STATES",
    "ChainGroupBound",
    "ChoiceBound",
    "GroupBound",
    "LowerBound",
    "RestrictionBound",
    "StorageMasks",
    "best_lower_bound",
    "chain_group_lower_bound",
    "choice_lower_bound",
    "forced_live_masks",
    "forward_value_groups",
    "free_branch_groups",
    "greedy_chain",
    "group_lower_bound",
    "heavy_path",
    "live_set_lower_bound",
    "optimizer_groups",
    "peak_window_chain_bound",
    "peak_window_groups",
    "restriction_bound",
    "storage_masks",
    "update_group_lower_bound",
    "weighted_mask_sum",
    "window_bound",
]
