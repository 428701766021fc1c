"""What fits, in words: the largest batch under a memory size; the sweep's number lists."""

from __future__ import annotations

import re
from collections.abc import Sequence

from app.core.formatting import fmt_bytes
from roam_core.base.errors import ConfigError
from roam_core.planner.whatfits import FIT_METHODS, FitRow, largest_fitting, method_label

__all__ = ["GPU_SIZES_GIB", "fit_answer", "parse_ints"]

#: Horizontal lines: common accelerator memory sizes (GiB).
GPU_SIZES_GIB = (24, 40, 80, 141)


def parse_ints(text: str | float | None, what: str) -> list[int]:
    """``"1 2, 4"`` -> ``[1, 2, 4]`` (sorted, unique, positive).

    Raises
    ------
    ConfigError
        Naming ``what`` when an entry is not a positive whole number.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        text = str(int(text))
    out = set()
    for tok in re.split(r"[\s,;]+", str(text or "").strip()):
        if not tok:
            continue
        if not tok.isdigit() or int(tok) <= 0:
            raise ConfigError(f"{what}: {tok!r} is not a positive whole number")
        out.add(int(tok))
    return sorted(out)


def fit_answer(rows: Sequence[FitRow], memory_gib: float) -> list[str]:
    """"Largest batch that fits" per method, in words."""
    if not rows:
        return []
    mem = int(float(memory_gib) * 2**30)
    best = largest_fitting(rows, mem)
    biggest = max(rows, key=lambda r: r.tokens)
    out = []
    for m in FIT_METHODS:
        r = best.get(m)
        if r is None:
            what = "nothing in the sweep fits"
        else:
            what = f"batch {r.batch_size}" + (f", seq {r.seq_len}" if r.seq_len else "")
            what += f" ({fmt_bytes(r.peak_bytes[m])})"
            if r is biggest:
                what += ": the largest tried; sweep larger batches to find the limit"
        out.append(f"{method_label(m)}: {what}")
    return out
