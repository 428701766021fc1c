"""Bounded gzip decompression for user files (a guard against gzip bombs).

The decompressed size is measured first, by streaming the data through ``zlib`` in chunks
and keeping none of them, so a bomb is refused having cost a few MiB however far it would
expand; only data under the cap is then decompressed for real.
"""

from __future__ import annotations

import zlib

from roam_core.base.errors import RoamError

__all__ = ["MAX_DECOMPRESSED_BYTES", "gunzip_bounded", "gunzipped_size", "is_gzip"]

#: Refuse to decompress more than this; 2 GiB.
MAX_DECOMPRESSED_BYTES = 2 * 1024**3
#: Bytes decompressed per step while measuring.
_CHUNK_BYTES = 1 << 20


def is_gzip(data: bytes) -> bool:
    """True when ``data`` starts with the gzip magic number."""
    return data[:2] == b"\x1f\x8b"


def gunzipped_size(data: bytes, error: type[RoamError], what: str, limit_bytes: int) -> int:
    """The decompressed size of gzip ``data`` (every member), streamed, nothing kept.

    Raises
    ------
    error
        Bad gzip data, or more than ``limit_bytes`` (raised as soon as the count passes it).
    """
    total = 0
    rest = data
    while rest:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        chunk = rest
        try:
            while chunk:
                out = d.decompress(chunk, _CHUNK_BYTES)
                total += len(out)
                if total > limit_bytes:
                    raise error(f"{what} expands beyond {limit_bytes} bytes")
                chunk = d.unconsumed_tail
            total += len(d.flush())
        except zlib.error as e:
            raise error(f"{what} is not valid gzip: {e}") from None
        if not d.eof:
            raise error(f"{what} is not valid gzip: the data ends early")
        rest = d.unused_data.lstrip(b"\x00")  # concatenated members (zero padding allowed)
        if total > limit_bytes:
            raise error(f"{what} expands beyond {limit_bytes} bytes")
    return total


def gunzip_bounded(data: bytes, error: type[RoamError], what: str,
                   limit_bytes: int | None = None) -> bytes:
    """Decompress gzip ``data``, raising ``error`` for bad data or more than ``limit_bytes``
    (default :data:`MAX_DECOMPRESSED_BYTES`), measured before anything is kept.

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
    gunzipped_size(data, error, what, limit_bytes)
    parts: list[bytes] = []
    rest = data
    while rest:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            parts.append(d.decompress(rest))
            parts.append(d.flush())
        except zlib.error as e:  # pragma: no cover - measured above
            raise error(f"{what} is not valid gzip: {e}") from None
        rest = d.unused_data.lstrip(b"\x00")
    parts = [p for p in parts if p]
    return parts[0] if len(parts) == 1 else b"".join(parts)
