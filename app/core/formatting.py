"""Bytes and FLOPs for people: binary units everywhere in the app."""

from __future__ import annotations

from roam_core.base.units import format_bytes

__all__ = ["byte_unit", "flops_text", "fmt_bytes", "kind_label", "order_name"]

#: Binary units for people (``fmt_bytes(1536) == '1.50 KiB'``; ``'n/a'`` for ``None``).
fmt_bytes = format_bytes

_UNIT_NAMES = ("B", "KiB", "MiB", "GiB", "TiB")


def byte_unit(max_bytes: float) -> tuple[float, str]:
    """``(divisor, name)`` of the binary unit that shows ``max_bytes`` best (B .. TiB).

    >>> byte_unit(3 * 2**20), byte_unit(1000)
    ((1048576.0, 'MiB'), (1.0, 'B'))
    """
    i = 0
    while max_bytes >= 1024 ** (i + 1) and i < len(_UNIT_NAMES) - 1:
        i += 1
    return float(1024**i), _UNIT_NAMES[i]


def flops_text(flops: float) -> str:
    """``1.2 GFLOP`` style.

    >>> flops_text(1.5e9), flops_text(12)
    ('1.50 GFLOP', '12 FLOP')
    """
    for div, name in ((1e12, "TFLOP"), (1e9, "GFLOP"), (1e6, "MFLOP"), (1e3, "kFLOP")):
        if flops >= div:
            return f"{flops / div:,.2f} {name}"
    return f"{flops:,.0f} FLOP"


def order_name(label: str) -> str:
    """An order's label as a noun: ``"<label> order"``, unless the label names its order
    already (no "eager (program order) order").

    >>> order_name("eager (program order)"), order_name("planned (roam)")
    ('eager (program order)', 'planned (roam) order')
    """
    return label if label.endswith("order)") else f"{label} order"


def kind_label(kind: object) -> str:
    """A storage kind as people read it: ``"optimizer state"`` for ``optimizer_state``.

    Parameters
    ----------
    kind : str or enum
        A kind name, or a :class:`~roam_core.model.graph.TensorKind` (its ``value``).

    Returns
    -------
    str
        The name with underscores as spaces.

    Examples
    --------
    >>> kind_label("optimizer_state")
    'optimizer state'
    """
    return str(getattr(kind, "value", kind)).replace("_", " ")
