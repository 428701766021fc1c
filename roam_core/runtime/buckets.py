"""Pad variable-length batches to a few planned shapes (buckets).

Every batch shape is its own plan (:mod:`roam_core.runtime.step_plans`): text of any length
would plan every length it meets.  Padding each batch up to the next of a few *bucket*
lengths bounds that to one plan per bucket (trace and plan once, then cached on disk)::

    from roam_core.runtime.buckets import pad_to_bucket

    BUCKETS = (64, 128, 256)
    for ids in loader:                                  # (batch, any length <= 256)
        inputs = pad_to_bucket(ids, BUCKETS, value=tokenizer.pad_token_id)
        labels = pad_to_bucket(ids, BUCKETS, value=-100)   # -100: ignored by the loss
        mask = pad_to_bucket(torch.ones_like(ids), BUCKETS, value=0)
        loss = step(inputs, mask, labels)

**Masking keeps the loss exact.**  Padding adds positions, so it must be kept out of
everything that mixes positions:

* the **loss**: label padded positions with the loss's ignore index
  (``F.cross_entropy(..., ignore_index=-100)``, Hugging Face's ``labels=-100``) so that they
  add nothing and the mean runs over the real tokens only (a plain ``mean`` or ``sum`` over
  all positions would count the padding);
* **attention**: pass the padding mask (``attention_mask``), or pad at the end under causal
  attention, where real positions never see later ones;
* **batch statistics** (BatchNorm over a padded dimension) cannot be masked: do not pad what
  they reduce over.

With that, the planned step on the padded batch equals the eager step on the same padded
batch bit for bit, and equals the eager step on the unpadded batch up to float rounding
(kernels of another size may sum in another order).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from roam_core.base.errors import ConfigError

__all__ = ["bucket_length", "pad_to_bucket"]


def bucket_length(length: int, buckets: Sequence[int]) -> int:
    """The smallest bucket at least ``length``.

    Raises
    ------
    ConfigError
        No bucket is that long (or ``buckets`` is empty or not positive).

    Examples
    --------
    >>> bucket_length(70, (64, 128, 256)), bucket_length(64, (256, 64, 128))
    (128, 64)
    """
    sizes = sorted(int(b) for b in buckets)
    if not sizes or sizes[0] < 1:
        raise ConfigError(f"buckets must be positive lengths, got {tuple(buckets)!r}")
    for b in sizes:
        if b >= length:
            return b
    raise ConfigError(f"length {length} is longer than the largest bucket {sizes[-1]}: add "
                      "a bucket or truncate the batch")


def pad_to_bucket(x: torch.Tensor, buckets: Sequence[int], *, dim: int = -1,
                  value: float | int = 0) -> torch.Tensor:
    """``x`` padded with ``value`` at the end of ``dim`` to the next bucket length.

    Parameters
    ----------
    x : Tensor
        A batch (e.g. token ids ``(batch, length)``).
    buckets : sequence of int
        The lengths to pad to (one plan each).
    dim : int
        The dimension to pad (default: the last).
    value : number
        The padding value: the pad token for inputs, the loss's ignore index (``-100``) for
        labels, 0 for attention masks.

    Returns
    -------
    Tensor
        A new tensor (``x`` itself when its length is a bucket already).

    Examples
    --------
    >>> pad_to_bucket(torch.tensor([[5, 6, 7]]), (4, 8), value=-100)
    tensor([[   5,    6,    7, -100]])
    """
    n = x.shape[dim]
    target = bucket_length(n, buckets)
    if target == n:
        return x
    shape = list(x.shape)
    shape[dim] = target - n
    pad = torch.full(shape, value, dtype=x.dtype, device=x.device)
    return torch.cat([x, pad], dim=dim)
