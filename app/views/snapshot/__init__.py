"""Measured memory: a PyTorch memory snapshot beside the plan."""
