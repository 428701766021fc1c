"""Layer 1, the data model: the graph, the plan, reachability, compact views, DSA problems
and the hand-made sample graphs.

Imports only :mod:`roam_core.base`.
"""
