"""Writing files so that nothing is lost: the old file or the complete new one, never half.

Every file roam writes goes through :func:`atomic_write` (or :func:`atomic_writer` for
writers that stream): the bytes go to a temporary file in the target's directory, are
flushed and ``fsync``-ed, and the temporary file is renamed over the target
(``os.replace``, atomic on POSIX).  A process killed at any moment leaves the previous file
intact (and at worst a stray ``.<name>.*.tmp`` beside it).

A target that exists and is not a regular file (``/dev/stdout``, ``/dev/null``, a FIFO) is
written in place: renaming over a device node would replace the node.  A full device
(``/dev/full``) then fails at the write, with a one-line :class:`OutputError`.

:func:`check_output_path` refuses an output path that cannot be written before any work
starts (a missing directory, a directory, no permission).
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from roam_core.base.errors import OutputError

__all__ = ["atomic_write", "atomic_writer", "check_output_dir", "check_output_path"]


def _target(path: str | os.PathLike[str]) -> Path:
    """The file a write to ``path`` replaces (a symlink is followed to its file)."""
    p = Path(os.fspath(path))
    if p.is_symlink():
        return Path(os.path.realpath(p))
    return p


def check_output_path(path: str | os.PathLike[str], what: str = "output file") -> Path:
    """Raise :class:`OutputError` unless a file can be written at ``path``.

    Parameters
    ----------
    path : path-like
        Where the file will be written.
    what : str
        The user-facing name of the output (``"plan file"``, ``"--snapshot"``).

    Returns
    -------
    Path
        ``path`` as a :class:`~pathlib.Path`.

    Examples
    --------
    >>> import tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> check_output_path(os.path.join(d, "plan.json")).name
    'plan.json'
    >>> check_output_path(os.path.join(d, "missing", "plan.json"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    roam_core.base.errors.OutputError: output file ...: directory ... does not exist
    >>> check_output_path(d)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    roam_core.base.errors.OutputError: output file ... is a directory
    """
    raw = os.fspath(path)
    if not raw:
        raise OutputError(f"{what}: empty path")
    p = _target(raw)
    if p.is_dir():
        raise OutputError(f"{what} {raw} is a directory")
    if p.exists() and not p.is_file():
        # a device or FIFO is written in place: it needs write permission on itself
        if not os.access(p, os.W_OK):
            raise OutputError(f"{what} {raw}: not writable")
        return Path(raw)
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.exists():
        raise OutputError(f"{what} {raw}: directory {parent} does not exist")
    if not parent.is_dir():
        raise OutputError(f"{what} {raw}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{what} {raw}: directory {parent} is not writable")
    return Path(raw)


def check_output_dir(path: str | os.PathLike[str], what: str = "output directory") -> Path:
    """Raise :class:`OutputError` unless ``path`` is (or can be made as) a writable
    directory; creates it (and its parents) when missing."""
    raw = os.fspath(path)
    if not raw:
        raise OutputError(f"{what}: empty path")
    p = Path(raw)
    if p.exists() and not p.is_dir():
        raise OutputError(f"{what} {raw} is not a directory")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"{what} {raw}: cannot create it ({e.strerror})") from None
    if not os.access(p, os.W_OK | os.X_OK):
        raise OutputError(f"{what} {raw}: not writable")
    return p


def _new_mode(target: Path) -> int:
    """The permission bits the new file gets: the old file's, else the umask's default."""
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike[str], *, binary: bool = True,
                  encoding: str = "utf-8", what: str = "output file") -> Iterator[IO[Any]]:
    """A file object whose contents replace ``path`` only when the ``with`` block ends
    without an error.

    Raises
    ------
    OutputError
        The file cannot be created, written (disk full) or renamed; the message names it.

    Examples
    --------
    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "out.txt")
    >>> with atomic_writer(p, binary=False) as f:
    ...     _ = f.write("hello")
    >>> open(p).read()
    'hello'
    """
    raw = os.fspath(path)
    target = _target(raw)
    mode = "wb" if binary else "w"
    kw: dict[str, Any] = {} if binary else {"encoding": encoding, "newline": ""}
    if target.exists() and not target.is_file():  # a device or FIFO: written in place
        try:
            with open(target, mode, **kw) as f:
                yield f
        except OSError as e:
            raise OutputError(f"cannot write {what} {raw}: {e.strerror or e}") from None
        return
    parent = target.parent if str(target.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=parent)
    except OSError as e:
        raise OutputError(f"cannot write {what} {raw}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, mode, **kw) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _new_mode(target))
        os.replace(tmp, target)
    except OSError as e:
        _unlink(tmp)
        raise OutputError(f"cannot write {what} {raw}: {e.strerror or e}") from None
    except BaseException:
        _unlink(tmp)
        raise
    _fsync_dir(parent)


def atomic_write(path: str | os.PathLike[str], data: bytes | str, *,
                 encoding: str = "utf-8", what: str = "output file") -> None:
    """Write ``data`` to ``path`` atomically (see the module docstring).

    Raises
    ------
    OutputError
        The file cannot be written; the message names it.
    """
    with atomic_writer(path, binary=isinstance(data, bytes), encoding=encoding,
                       what=what) as f:
        f.write(data)


def _unlink(tmp: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(tmp)


def _fsync_dir(directory: Path) -> None:
    """Persist the rename (best effort: some file systems refuse a directory fsync)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
