"""Which scaled-dot-product-attention kernel a traced step uses, and what it saves.

``--attention`` (``roam trace``, ``roam fit``, the zoo's and Hugging Face builders'
``attention=``) picks the kernel of ``F.scaled_dot_product_attention`` as users run it:

==============  ===========================================================================
``sdpa``        torch chooses (on CPU: the CPU flash kernel, or the math path with some masks)
``math``        the math path: the ``B x H x T x T`` attention probabilities are saved for
                the backward (the zoo transformers write it out as matmul / softmax)
``flash``       the flash kernel: saves the output and a ``B x H x T`` float32 logsumexp
``efficient``   the memory-efficient kernel (CUDA): saves the output and a logsumexp
==============  ===========================================================================

On CPU there is no memory-efficient kernel; ``efficient`` is **modelled by the CPU flash
kernel**, whose saved tensors (output, ``B x H x T`` float32 logsumexp) are what the CUDA
memory-efficient kernel saves, except that CUDA pads the logsumexp's ``T`` to a multiple of
32 and keeps an 8-byte philox seed and offset (at most ``31 x 4`` bytes more per head and
sample).  The CPU flash kernel has no attention dropout (torch then finds no kernel): CUDA's
flash kernel re-draws its dropout mask from a seed in the backward and saves no mask, so a
model with attention dropout is modelled on CPU by setting that dropout to 0 (Hugging Face:
``attn_pdrop=0`` / ``attention_dropout=0``; the zoo's transformers do it themselves and log a
warning, since the CPU step then runs without attention dropout).  On CUDA each choice runs
its own kernel.  :func:`attention_note` says which.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from roam_core.base.errors import TraceError

__all__ = ["ATTENTION_BACKENDS", "attention_note", "check_attention", "sdpa_backend"]

#: ``--attention`` choices.
ATTENTION_BACKENDS = ("sdpa", "math", "flash", "efficient")


def check_attention(attention: str) -> str:
    """``attention`` if it is one of :data:`ATTENTION_BACKENDS` (else :class:`TraceError`)."""
    if attention not in ATTENTION_BACKENDS:
        raise TraceError(f"unknown attention {attention!r}; choose one of "
                         f"{', '.join(ATTENTION_BACKENDS)}")
    return attention


@contextlib.contextmanager
def sdpa_backend(attention: str, device_type: str) -> Iterator[None]:
    """Restrict ``F.scaled_dot_product_attention`` to the chosen kernel (``sdpa``: none).

    ``efficient`` on CPU uses the flash kernel (see the module notes).
    """
    check_attention(attention)
    if attention == "sdpa":
        yield
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {"math": SDPBackend.MATH, "flash": SDPBackend.FLASH_ATTENTION,
               "efficient": SDPBackend.EFFICIENT_ATTENTION}[attention]
    if attention == "efficient" and device_type != "cuda":
        backend = SDPBackend.FLASH_ATTENTION
    with sdpa_kernel(backend):
        yield


def attention_note(attention: str, device_type: str = "cpu") -> str:
    """One line saying what the trace of ``attention`` on ``device_type`` models.

    Examples
    --------
    >>> attention_note("efficient")
    'efficient: modelled on cpu by the flash kernel (same saved output and logsumexp)'
    """
    check_attention(attention)
    if attention == "efficient" and device_type != "cuda":
        return (f"efficient: modelled on {device_type} by the flash kernel (same saved "
                "output and logsumexp)")
    return {"sdpa": "sdpa: the kernel torch picks on this device",
            "math": "math: attention probabilities (B x H x T x T) saved for the backward",
            "flash": "flash: output and logsumexp saved for the backward",
            "efficient": "efficient: output and logsumexp saved for the backward",
            }[attention]
