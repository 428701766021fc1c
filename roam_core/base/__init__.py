"""Layer 0, the base: errors, settings, units, bounded gzip and the shared CP-SAT set-up.

Nothing here imports any other part of roam_core.
"""
