"""Reading a large JSON object one array element at a time.

A graph file is one object whose big members are arrays (``ops``, ``tensors``, ...).
``json.loads`` would build every element's dict before the first one is checked, about
five times the text in memory; :func:`scan_object` decodes one element at a time (with the
standard library's C decoder) and hands it to a callback that turns it into its record, so
the dicts are freed as the scan goes and a bad element is reported before the rest is read.

Everything the standard decoder can raise on hostile input is turned into the caller's
error type: bad syntax, invalid UTF-8, integers of more than 4300 digits, nesting deep
enough to exhaust the recursion limit, duplicate members.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from json.decoder import scanstring  # type: ignore[attr-defined]  # public, untyped
from typing import Any

from roam_core.base.errors import RoamError

__all__ = ["STREAMED", "decode_text", "json_depth_ok", "loads_bounded", "scan_object"]

#: What :func:`scan_object` returns for a member that it handed out element by element.
STREAMED: Any = type("Streamed", (), {"__repr__": lambda self: "STREAMED"})()

_WS = re.compile(r"[ \t\n\r]*")
_WS_CHARS = frozenset(" \t\n\r")
_DECODER = json.JSONDecoder()


def decode_text(data: bytes | bytearray | str, error: type[RoamError], what: str) -> str:
    """UTF-8 text of ``data`` (a leading byte-order mark dropped)."""
    if isinstance(data, str):
        return data
    try:
        text = bytes(data).decode("utf-8") if isinstance(data, bytearray) else \
            data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{what} is not valid JSON: not UTF-8 text ({e.reason} at byte "
                    f"{e.start})") from None
    return text[1:] if text.startswith("\ufeff") else text


def _fail(error: type[RoamError], what: str, e: BaseException) -> RoamError:
    if isinstance(e, RecursionError):
        return error(f"{what} is not valid JSON: nested too deeply")
    if isinstance(e, json.JSONDecodeError):
        return error(f"{what} is not valid JSON: {e}")
    if isinstance(e, ValueError):  # e.g. an integer of more than 4300 digits
        return error(f"{what} is not valid JSON: {e}")
    return error(f"{what} is not valid JSON: it ends early")


def loads_bounded(text: str, error: type[RoamError], what: str) -> Any:
    """``json.loads`` whose every failure (syntax, huge integers, deep nesting) raises
    ``error`` with a one-line message."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:
        raise _fail(error, what, e) from None


def json_depth_ok(value: Any, max_depth: int) -> bool:
    """True when ``value`` nests at most ``max_depth`` containers deep (iterative walk).

    Examples
    --------
    >>> json_depth_ok({"a": [1, {"b": 2}]}, 3), json_depth_ok({"a": [1, {"b": 2}]}, 2)
    (True, False)
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            if d + 1 > max_depth:
                return False
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            if d + 1 > max_depth:
                return False
            stack.extend((x, d + 1) for x in v)
    return True


def scan_object(text: str, streamed: Mapping[str, Callable[[Any, int], None]],
                error: type[RoamError], what: str) -> dict[str, Any]:
    """Parse the JSON object ``text``; members named in ``streamed`` whose value is an array
    are handed to their callback element by element (``callback(element, index)``) and not
    kept.

    Returns
    -------
    dict
        Every member: :data:`STREAMED` for the arrays handed out, the value for the others
        (a streamed member whose value is not an array is returned for the caller to refuse).

    Raises
    ------
    error
        Not a JSON object, bad syntax, a duplicate member, deep nesting, huge integers; and
        whatever a callback raises.

    Examples
    --------
    >>> from roam_core.base.errors import GraphError
    >>> seen = []
    >>> scan_object('{"a": 1, "xs": [1, 2, 3]}', {"xs": lambda v, i: seen.append(v)},
    ...             GraphError, "file"), seen
    ({'a': 1, 'xs': STREAMED}, [1, 2, 3])
    """
    try:
        return _scan(text, streamed, error, what)
    except RoamError:
        raise
    except (ValueError, RecursionError, IndexError) as e:
        raise _fail(error, what, e) from None


def _ws(text: str, i: int) -> int:
    if text[i:i + 1] not in _WS_CHARS:  # compact JSON: no whitespace at all
        return i
    m = _WS.match(text, i)
    return m.end() if m else i


def _expect(text: str, i: int, ch: str, error: type[RoamError], what: str) -> None:
    if text[i:i + 1] != ch:
        got = repr(text[i]) if i < len(text) else "the end"
        raise error(f"{what} is not valid JSON: expected {ch!r} at char {i}, found {got}")


def _scan(text: str, streamed: Mapping[str, Callable[[Any, int], None]],
          error: type[RoamError], what: str) -> dict[str, Any]:
    i = _ws(text, 0)
    if text[i:i + 1] != "{":
        raise error(f"{what} must hold a JSON object")
    i = _ws(text, i + 1)
    out: dict[str, Any] = {}
    seen: set[str] = set()
    if text[i:i + 1] == "}":
        i += 1
    else:
        while True:
            _expect(text, i, '"', error, what)
            key, i = scanstring(text, i + 1)
            if key in seen:
                raise error(f"{what} has the member {key[:80]!r} twice")
            seen.add(key)
            i = _ws(text, i)
            _expect(text, i, ":", error, what)
            i = _ws(text, i + 1)
            if key in streamed and text[i:i + 1] == "[":
                i = _array(text, i, streamed[key], error, what)
                out[key] = STREAMED
            else:
                out[key], i = _DECODER.raw_decode(text, i)
            i = _ws(text, i)
            if text[i:i + 1] == ",":
                i = _ws(text, i + 1)
                continue
            _expect(text, i, "}", error, what)
            i += 1
            break
    if _ws(text, i) != len(text):
        raise error(f"{what} is not valid JSON: extra data at char {_ws(text, i)}")
    return out


def _array(text: str, i: int, each: Callable[[Any, int], None], error: type[RoamError],
           what: str) -> int:
    """Decode the array at ``text[i] == '['`` element by element; returns the index past
    its ``]``."""
    i = _ws(text, i + 1)
    if text[i:i + 1] == "]":
        return i + 1
    n = 0
    while True:
        value, i = _DECODER.raw_decode(text, i)
        each(value, n)
        n += 1
        i = _ws(text, i)
        c = text[i:i + 1]
        if c == ",":
            i = _ws(text, i + 1)
        elif c == "]":
            return i + 1
        else:
            _expect(text, i, "]", error, what)
