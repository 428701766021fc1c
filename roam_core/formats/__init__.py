"""Layer 3, file formats: graph and plan JSON, MiniMalloc CSV, PyTorch memory snapshots.

Every reader is bounded and typed (a bad file raises a :class:`~roam_core.base.errors.RoamError`
subclass naming what is wrong); nothing here unpickles with the standard unpickler.
"""
