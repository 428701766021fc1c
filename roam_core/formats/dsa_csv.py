"""MiniMalloc's CSV format (google/minimalloc) for DSA problems and solutions.

A header ``id,lower,upper,size`` (optionally ``alignment`` and ``offset`` columns), one buffer
per row.  An ``offset`` column on input fixes those buffers' offsets (an empty cell leaves it
free).

Examples
--------
>>> p = loads_problem("id,lower,upper,size\\nx,0,2,4\\ny,1,3,4\\n", capacity=8)
>>> p.lower_bound(), [b.id for b in p.buffers]
(8, ['x', 'y'])
>>> print(dumps_problem(p, Solution((0, 4), 8)), end="")
id,lower,upper,size,offset
x,0,2,4,0
y,1,3,4,4
"""

from __future__ import annotations

import csv
import gzip
import io
import os

from roam_core.base.atomic import atomic_write
from roam_core.base.errors import PlanFormatError
from roam_core.base.user_files import read_user_bytes
from roam_core.formats.fields import short, utf8_ok
from roam_core.formats.limits import MAX_INT, FileLimits
from roam_core.model.dsa import Buffer, Problem, Solution

__all__ = ["dumps_problem", "load_problem", "loads_problem", "save_problem"]

_REQUIRED = ("id", "lower", "upper", "size")
#: Digits of the longest integer cell read (2**62 has 19).
_MAX_INT_CHARS = 40
#: Characters of the longest buffer id.
_MAX_ID_CHARS = 4096


def _int_cell(row: dict[str, str], col: str, line: int, *, default: int | None = None) -> int:
    raw = (row.get(col) or "").strip()
    if not raw:
        if default is not None:
            return default
        raise PlanFormatError(f"CSV row {line}: empty {col!r} cell")
    if len(raw) > _MAX_INT_CHARS:
        raise PlanFormatError(f"CSV row {line}: {col!r} has {len(raw):,} characters, not an "
                              "integer below 2**62")
    try:
        v = int(raw)
    except ValueError:
        raise PlanFormatError(f"CSV row {line}: {col!r} is {short(raw)}, not an integer"
                              ) from None
    if not -MAX_INT < v < MAX_INT:
        raise PlanFormatError(f"CSV row {line}: {col!r} is {short(v)}, not below 2**62")
    return v


def loads_problem(text: str, capacity: int | None = None) -> Problem:
    """Parse MiniMalloc CSV text into a :class:`Problem`.

    Parameters
    ----------
    text : str
        CSV with a header containing ``id,lower,upper,size`` (any order), optionally
        ``alignment`` and ``offset``.
    capacity : int, optional
        The capacity to attach.

    Raises
    ------
    PlanFormatError
        Missing columns, non-integer cells, empty lifetimes, duplicate ids; the message
        names the CSV row (1 = the first data row).
    """
    if not isinstance(text, str):
        raise PlanFormatError(f"loads_problem needs str, not {type(text).__name__}")
    if "\x00" in text:
        raise PlanFormatError("CSV is malformed: it contains a NUL byte")
    try:
        return _parse(text, capacity)
    except csv.Error as e:  # a field over the csv module's size limit, a NUL byte
        raise PlanFormatError(f"CSV is malformed: {e}") from None


def _parse(text: str, capacity: int | None) -> Problem:
    reader = csv.DictReader(io.StringIO(text.lstrip("\ufeff")))
    header = [h.strip() for h in (reader.fieldnames or [])]
    reader.fieldnames = header
    missing = [c for c in _REQUIRED if c not in header]
    if missing:
        raise PlanFormatError(f"CSV header {[short(h) for h in header[:10]]} lacks column(s) "
                              f"{missing}")
    buffers: list[Buffer] = []
    ids: set[str] = set()
    for line, row in enumerate(reader, start=1):
        if None in row:
            raise PlanFormatError(f"CSV row {line}: more cells than header columns")
        bid = (row.get("id") or "").strip()
        if not bid:
            raise PlanFormatError(f"CSV row {line}: empty 'id' cell")
        if len(bid) > _MAX_ID_CHARS or not utf8_ok(bid):
            raise PlanFormatError(f"CSV row {line}: 'id' is longer than {_MAX_ID_CHARS} "
                                  "characters or not valid Unicode")
        if bid in ids:
            raise PlanFormatError(f"CSV row {line}: duplicate id {short(bid)}")
        ids.add(bid)
        lower = _int_cell(row, "lower", line)
        upper = _int_cell(row, "upper", line)
        size = _int_cell(row, "size", line)
        align = _int_cell(row, "alignment", line, default=1) if "alignment" in header else 1
        offset: int | None = None
        if "offset" in header and (row.get("offset") or "").strip():
            offset = _int_cell(row, "offset", line)
        if upper <= lower:
            raise PlanFormatError(f"CSV row {line}: empty lifetime [{lower}, {upper})")
        if lower < 0:
            raise PlanFormatError(f"CSV row {line}: negative 'lower' {lower}")
        if size < 0 or align < 1 or (offset is not None and offset < 0):
            raise PlanFormatError(f"CSV row {line}: negative size/offset or alignment < 1")
        buffers.append(Buffer(bid, lower, upper, size, align, offset))
    return Problem(tuple(buffers), capacity)


def dumps_problem(problem: Problem, solution: Solution | None = None) -> str:
    """MiniMalloc CSV text for a problem; with a solution, an ``offset`` column is added.

    An ``alignment`` column is written only when some buffer's alignment is not 1.  Without a
    solution, fixed offsets are written in an ``offset`` column (empty for free buffers).
    """
    out = io.StringIO()
    with_align = any(b.alignment != 1 for b in problem.buffers)
    with_fixed = solution is None and any(b.offset is not None for b in problem.buffers)
    cols = ["id", "lower", "upper", "size"] + (["alignment"] if with_align else [])
    if solution is not None or with_fixed:
        cols.append("offset")
    if solution is not None and len(solution.offsets) != len(problem.buffers):
        raise PlanFormatError(
            f"solution has {len(solution.offsets)} offsets for {len(problem.buffers)} buffers")
    out.write(",".join(cols) + "\n")
    for i, b in enumerate(problem.buffers):
        cells = [b.id, str(b.lower), str(b.upper), str(b.size)]
        if with_align:
            cells.append(str(b.alignment))
        if solution is not None:
            cells.append(str(solution.offsets[i]))
        elif with_fixed:
            cells.append("" if b.offset is None else str(b.offset))
        out.write(",".join(cells) + "\n")
    return out.getvalue()


def load_problem(path: str | os.PathLike[str], capacity: int | None = None, *,
                 limits: FileLimits | None = None) -> Problem:
    """Read a MiniMalloc CSV file (``.gz`` accepted; a regular file within ``limits``); see
    :func:`loads_problem`."""
    lim = limits if limits is not None else FileLimits.from_env()
    raw = read_user_bytes(path, PlanFormatError, "problem CSV",
                          max_file_bytes=lim.max_file_bytes,
                          max_decompressed_bytes=lim.max_json_bytes)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise PlanFormatError(f"{os.fspath(path)!r} is not UTF-8 text") from None
    return loads_problem(text, capacity)


def save_problem(path: str | os.PathLike[str], problem: Problem,
                 solution: Solution | None = None) -> None:
    """Write MiniMalloc CSV atomically (gzip when the path ends in ``.gz``).

    Raises
    ------
    OutputError
        The file cannot be written (the previous file, if any, is kept).
    """
    data = dumps_problem(problem, solution).encode("utf-8")
    if os.fspath(path).endswith(".gz"):
        data = gzip.compress(data, compresslevel=6, mtime=0)
    atomic_write(path, data, what="CSV file")
