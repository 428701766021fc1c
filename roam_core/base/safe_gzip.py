"""Bounded gzip decompression for user files (a guard against gzip bombs)."""

from __future__ import annotations

import zlib

from roam_core.base.errors import RoamError

__all__ = ["MAX_DECOMPRESSED_BYTES", "gunzip_bounded"]

#: Refuse to decompress more than this; 2 GiB.
MAX_DECOMPRESSED_BYTES = 2 * 1024**3


def gunzip_bounded(data: bytes, error: type[RoamError], what: str,
                   limit_bytes: int | None = None) -> bytes:
    """Decompress gzip ``data``, raising ``error`` for bad data or more than ``limit_bytes``
    (default :data:`MAX_DECOMPRESSED_BYTES`).

    Examples
    --------
    >>> import gzip
    >>> from roam_core.base.errors import GraphError
    >>> gunzip_bounded(gzip.compress(b"abc"), GraphError, "graph file")
    b'abc'
    >>> gunzip_bounded(gzip.compress(b"x" * 100), GraphError, "graph file", limit_bytes=10)
    Traceback (most recent call last):
    ...
    roam_core.base.errors.GraphError: graph file expands beyond 10 bytes
    """
    if limit_bytes is None:
        limit_bytes = MAX_DECOMPRESSED_BYTES
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = d.decompress(data, limit_bytes)
    except zlib.error as e:
        raise error(f"{what} is not valid gzip: {e}") from None
    if d.unconsumed_tail:
        raise error(f"{what} expands beyond {limit_bytes} bytes")
    return out
