"""The "merge repeated casts" option of the trace panel and of What-fits.

Under autocast each op that wants a bf16 (fp16) input casts the fp32 activation itself: one
activation read by three projections is cast three times, and each matmul saves its own
copy for its weight gradient.  ``merge_casts`` (:mod:`roam_core.trace.identical_casts`)
makes each cast once; the copies are bit-identical, so the step computes what eager
computes.  Only autocast precisions make such casts, so the option is disabled (and
cleared) for any other precision, and a job that is asked to merge in one is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dash import dcc, html

from roam_core.base.errors import ConfigError

__all__ = ["AUTOCAST_PRECISIONS", "MERGE", "merge_casts_choice", "merge_casts_field",
           "merge_casts_state", "note_id"]

#: The precisions that trace the step under autocast (the only ones with casts to merge).
AUTOCAST_PRECISIONS = ("bf16-mixed", "fp16-mixed")
#: The checklist's one value.
MERGE = "merge"
_LABEL = "merge autocast's repeated casts"


def note_id(checklist_id: str) -> str:
    """Id of the line under the checkbox that says what it does (or why it is off)."""
    return f"{checklist_id}-note"


def merge_casts_field(checklist_id: str, precision: str | None) -> html.Div:
    """The checkbox (off; disabled unless ``precision``, the one the form starts with, is an
    autocast precision) and its note; a callback keeps both in step with the form."""
    options, value, note = merge_casts_state(precision, [])
    return html.Div([
        dcc.Checklist(id=checklist_id, value=value, options=options),
        html.Div(note, id=note_id(checklist_id), className="muted"),
    ], className="field merge-casts")


def merge_casts_state(precision: str | None, value: Sequence[str] | None
                      ) -> tuple[list[dict[str, Any]], list[str], str]:
    """Options, value and note of the checkbox for the precision the step is traced in.

    >>> merge_casts_state("fp32", ["merge"])[1:]
    ([], 'only for autocast precisions (bf16-mixed, fp16-mixed): fp32 makes no casts to merge')
    >>> merge_casts_state("bf16-mixed", ["merge"])[1]
    ['merge']
    """
    on = precision in AUTOCAST_PRECISIONS
    options = [{"label": _LABEL, "value": MERGE, "disabled": not on}]
    if not on:
        return (options, [], f"only for autocast precisions ({', '.join(AUTOCAST_PRECISIONS)}):"
                             f" {precision or 'fp32'} makes no casts to merge")
    return (options, [v for v in value or () if v == MERGE],
            "each activation cast once instead of once per reader (bit-identical values; "
            "eager PyTorch makes every copy)")


def merge_casts_choice(value: Sequence[str] | None, precision: str) -> bool:
    """Whether the job merges casts: ticked, in an autocast precision.

    Raises
    ------
    ConfigError
        Ticked for a precision without autocast (the page clears it; a stale form must not
        run something other than what it says).

    >>> merge_casts_choice(["merge"], "bf16-mixed"), merge_casts_choice([], "fp32")
    (True, False)
    """
    if MERGE not in (value or ()):
        return False
    if precision not in AUTOCAST_PRECISIONS:
        raise ConfigError(f"merge autocast's repeated casts: precision {precision} has no "
                          f"autocast casts; choose {' or '.join(AUTOCAST_PRECISIONS)}")
    return True
