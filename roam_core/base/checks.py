"""Argument checks shared by the settings dataclasses of every layer.

Examples
--------
>>> at_least("workers", 2, 1)
>>> at_least("workers", 0, 1)
Traceback (most recent call last):
    ...
roam_core.base.errors.ConfigError: workers must be at least 1, not 0
"""

from __future__ import annotations

from roam_core.base.errors import ConfigError, RoamError

__all__ = ["at_least", "require_type"]


def at_least(name: str, value: object, low: float) -> None:
    """Raise :class:`ConfigError` unless ``value`` is a number ``>= low``.

    Parameters
    ----------
    name : str
        The setting's user-facing name (``"order.time_limit_s"``), used in the message.
    value : object
        The value given.
    low : int or float
        The smallest value allowed; an ``int`` here also requires an integer value.

    Raises
    ------
    ConfigError
        ``value`` is not a number of the right kind, is NaN or infinite, or is below
        ``low``.
    """
    kinds: tuple[type, ...] = (int,) if isinstance(low, int) else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        kind = "an integer" if kinds == (int,) else "a number"
        raise ConfigError(f"{name} must be {kind}, not {value!r}")
    if not value >= low:  # type: ignore[operator]  # a number by the check above; catches NaN
        raise ConfigError(f"{name} must be at least {low}, not {value!r}")
    if value == float("inf"):
        raise ConfigError(f"{name} must be a finite number, not {value!r}")


def require_type(value: object, kinds: type | tuple[type, ...], name: str,
                 error: type[RoamError] = ConfigError) -> None:
    """Raise ``error`` unless ``value`` is an instance of ``kinds`` (the public API's check
    of its arguments: a clear message instead of an ``AttributeError`` deep inside).

    Examples
    --------
    >>> require_type(None, int, "make_plan: graph")
    Traceback (most recent call last):
    ...
    roam_core.base.errors.ConfigError: make_plan: graph must be int, not None
    """
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in (
            kinds if isinstance(kinds, tuple) else (kinds,))):
        names = " or ".join(k.__name__ for k in (kinds if isinstance(kinds, tuple)
                                                   else (kinds,)))
        got = "None" if value is None else type(value).__name__
        raise error(f"{name} must be {names}, not {got}")
