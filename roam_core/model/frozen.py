"""Read-only containers: what a :class:`~roam_core.model.graph.Graph` hands out.

A graph caches its fingerprint and indices, so a table edited in place would leave them
describing another graph.  :class:`FrozenDict` and :class:`FrozenList` are ``dict`` and
``list`` subclasses whose every mutating method raises ``TypeError``: lookups stay as fast as
a plain dict's (no per-access copy, no wrapper call), they compare equal to plain dicts and
lists, serialise to JSON, and pickle as themselves.

Examples
--------
>>> d = FrozenDict({"a": 1})
>>> d["a"], d == {"a": 1}
(1, True)
>>> d["b"] = 2
Traceback (most recent call last):
...
TypeError: FrozenDict is read-only
>>> freeze({"xs": [1, {"y": 2}]})["xs"][1]["y"]
2
"""

from __future__ import annotations

from typing import Any, NoReturn, TypeVar

__all__ = ["FrozenDict", "FrozenList", "freeze", "thaw"]

K = TypeVar("K")
V = TypeVar("V")


def _read_only(self: object, *args: object, **kwargs: object) -> NoReturn:
    raise TypeError(f"{type(self).__name__} is read-only")


class FrozenDict(dict[K, V]):
    """A ``dict`` that cannot be changed after it is made."""

    __slots__ = ()
    __setitem__ = _read_only
    __delitem__ = _read_only
    __ior__ = _read_only
    clear = _read_only
    pop = _read_only
    popitem = _read_only
    setdefault = _read_only
    update = _read_only

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (dict(self),))

    def __copy__(self) -> FrozenDict[K, V]:
        return self

    def __repr__(self) -> str:
        return f"FrozenDict({dict.__repr__(self)})"


class FrozenList(list[V]):
    """A ``list`` that cannot be changed after it is made."""

    __slots__ = ()
    __setitem__ = _read_only
    __delitem__ = _read_only
    __iadd__ = _read_only
    __imul__ = _read_only
    append = _read_only
    extend = _read_only
    insert = _read_only
    pop = _read_only
    remove = _read_only
    clear = _read_only
    sort = _read_only
    reverse = _read_only

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (list(self),))

    def __copy__(self) -> FrozenList[V]:
        return self

    def __hash__(self) -> int:  # type: ignore[override]  # list sets __hash__ = None; frozen, so hashable
        return hash(tuple(self))


def freeze(value: Any) -> Any:
    """``value`` with every dict, list and tuple in it made read-only (dicts and lists
    become :class:`FrozenDict` / :class:`FrozenList`, tuples keep their type)."""
    if isinstance(value, FrozenDict | FrozenList):
        return value
    if isinstance(value, dict):
        return FrozenDict({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return FrozenList(freeze(v) for v in value)
    if type(value) is tuple:
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """A plain, changeable deep copy of ``value``'s dicts and lists (frozen or not): for
    code outside roam that fills in what it is given, such as a Hugging Face config.

    >>> thaw(freeze({"rope": {"theta": 1.0}}))["rope"].setdefault("type", "default")
    'default'
    """
    if isinstance(value, dict):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, list):
        return [thaw(v) for v in value]
    if type(value) is tuple:
        return tuple(thaw(v) for v in value)
    return value
