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
