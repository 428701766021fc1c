"""Layer 4a, operator ordering: cheap orders and their registry, update groups and their
placement, weight-update rewrites, the task tree, the exact per-sub-task CP-SAT model and the
monolithic model.

A sibling of :mod:`roam_core.layout`: neither imports the other.
"""
