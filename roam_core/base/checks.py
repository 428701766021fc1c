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

from roam_core.base.errors import ConfigError

__all__ = ["at_least"]


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
        ``value`` is not a number of the right kind, is NaN, or is below ``low``.
    """
    kinds: tuple[type, ...] = (int,) if isinstance(low, int) else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        kind = "an integer" if kinds == (int,) else "a number"
        raise ConfigError(f"{name} must be {kind}, not {value!r}")
    if not value >= low:  # type: ignore[operator]  # a number by the check above; catches NaN
        raise ConfigError(f"{name} must be at least {low}, not {value!r}")
