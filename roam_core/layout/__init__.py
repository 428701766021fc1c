"""Layer 4b, memory layout: DSA heuristics and the exact search, the arena planner and the
layout baselines.

A sibling of :mod:`roam_core.ordering`: neither imports the other.
"""
