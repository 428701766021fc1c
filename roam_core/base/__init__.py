"""Layer 0, the base: errors, statuses, cancel tokens, the per-graph cache, units, bounded
gzip, executors, the shared CP-SAT set-up and the old module paths.

Nothing here imports any other part of roam_core.
"""
