"""Human-readable byte counts in binary units, shared by the CLI, benchmarks and the app."""

from __future__ import annotations

__all__ = ["format_bytes"]

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def format_bytes(n: float | None) -> str:
    """Bytes in binary units (B, KiB, MiB, GiB, TiB); ``"n/a"`` for ``None``.

    Examples
    --------
    >>> format_bytes(512), format_bytes(1536), format_bytes(3 * 2**20), format_bytes(5 * 2**30)
    ('512 B', '1.50 KiB', '3.00 MiB', '5.00 GiB')
    >>> format_bytes(None)
    'n/a'
    """
    if n is None:
        return "n/a"
    value, i = float(n), 0
    while abs(value) >= 1024 and i < len(_UNITS) - 1:
        value /= 1024
        i += 1
    return f"{int(value)} B" if i == 0 else f"{value:.2f} {_UNITS[i]}"


_SIZE_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3,
          "gb": 1000**3, "t": 1000**4, "tb": 1000**4, "kib": 2**10, "mib": 2**20,
          "gib": 2**30, "tib": 2**40}


def parse_size(text: str) -> int:
    """Bytes from ``"2GiB"``, ``"1.5 GB"``, ``"3000MiB"`` or ``"123456"`` (case-insensitive).

    Raises
    ------
    ValueError
        Not a positive size.

    Examples
    --------
    >>> parse_size("2GiB"), parse_size("1.5 kb"), parse_size("512")
    (2147483648, 1500, 512)
    """
    import re

    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    if m is None or m.group(2).lower() not in _SIZE_UNITS:
        raise ValueError(f"{text!r} is not a size (examples: 2GiB, 1.5GB, 3000MiB, 123456)")
    value = int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])
    if value <= 0:
        raise ValueError(f"{text!r} is not a positive size")
    return value
