"""Layer 2, the oracles: the one memory simulator, the independent validator, lower bounds,
brute force, the caching-allocator model and the eager baseline report.

Every solver above is checked by these; they import only the model and the base.
"""
