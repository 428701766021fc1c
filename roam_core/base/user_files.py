"""Reading a user's file with bounded resources: regular files only, size-capped, gzip
measured before it is expanded.

``/dev/zero`` would be read forever and a FIFO would block forever: both are refused by a
``stat`` of the opened descriptor (opened non-blocking, so that opening a FIFO does not wait
for a writer).  A file over ``max_bytes`` is refused before it is read.
"""

from __future__ import annotations

import os
import stat

from roam_core.base.errors import RoamError
from roam_core.base.safe_gzip import MAX_DECOMPRESSED_BYTES, gunzip_bounded, is_gzip

__all__ = ["read_user_bytes", "read_user_file"]


def read_user_file(path: str | os.PathLike[str], error: type[RoamError], what: str,
                   max_bytes: int) -> bytes:
    """The bytes of the regular file at ``path`` (at most ``max_bytes`` of them).

    Parameters
    ----------
    path : path-like
        The file.
    error : type of RoamError
        Raised for every problem, with a one-line message naming the file.
    what : str
        The user-facing name (``"graph file"``).
    max_bytes : int
        The largest file accepted.

    Raises
    ------
    error
        Missing, unreadable, not a regular file (a directory, device or FIFO), or too big.

    Examples
    --------
    >>> from roam_core.base.errors import GraphError
    >>> read_user_file("/dev/zero", GraphError, "graph file", 100)
    Traceback (most recent call last):
    ...
    roam_core.base.errors.GraphError: graph file '/dev/zero' is not a regular file
    """
    name = os.fspath(path)
    try:
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise error(f"cannot read {what} {name!r}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{what} {name!r} is not a regular file")
        if st.st_size > max_bytes:
            raise error(f"{what} {name!r} has {st.st_size:,} bytes, over the limit of "
                        f"{max_bytes:,}")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(min(max_bytes, st.st_size) + 1)
            if st.st_size < len(data) <= max_bytes:  # it grew since the stat
                data += f.read(max_bytes + 1 - len(data))
    except OSError as e:
        raise error(f"cannot read {what} {name!r}: {e.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:  # it grew while being read
        raise error(f"{what} {name!r} is over the limit of {max_bytes:,} bytes")
    return data


def read_user_bytes(path: str | os.PathLike[str], error: type[RoamError], what: str, *,
                    max_file_bytes: int, max_decompressed_bytes: int | None = None) -> bytes:
    """:func:`read_user_file`, gunzipped (against ``max_decompressed_bytes``) when the
    content is gzip."""
    data = read_user_file(path, error, what, max_file_bytes)
    if is_gzip(data):
        limit = MAX_DECOMPRESSED_BYTES if max_decompressed_bytes is None \
            else max_decompressed_bytes
        data = gunzip_bounded(data, error, what, limit)
    return data
