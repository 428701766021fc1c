"""The device a step runs on: ``"cpu"`` or ``"cuda"``, checked before anything is built."""

from __future__ import annotations

import os

import torch

from roam_core.base.errors import ExecutorError

__all__ = ["resolve_device"]


def resolve_device(device: str | torch.device) -> torch.device:
    """``"cpu"``/``"cuda"`` as a torch device; :class:`ExecutorError` when CUDA is absent."""
    dev = torch.device(device)
    if dev.type not in ("cpu", "cuda"):
        raise ExecutorError(f"unsupported device {str(device)!r}: use cpu or cuda")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ExecutorError("--device cuda: no CUDA device is visible in this process "
                                f"(torch {torch.__version__}); use --device cpu")
        # deterministic cuBLAS for the eager comparison; must precede cuBLAS init
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    return dev
