"""The plan settings chosen in the app: the record that keys the plan cache, and the one
parser of the plan-settings form."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from roam_core.base.errors import ConfigError

__all__ = [
    "BASELINE_METHODS",
    "PLAN_METHODS",
    "FormNumber",
    "PlanSettings",
    "settings_from_form",
]

#: "before" choices (value, label) offered by the app (names of ``registry.ORDER_METHODS``).
BASELINE_METHODS: tuple[tuple[str, str], ...] = (
    ("eager", "eager (program order)"),
    ("inductor", "Inductor-style"),
    ("lescea", "LESCEA"),
    ("xla", "XLA-style"),
    ("eager_moved_state", "eager, optimizer state moved (paper's PyTorch)"),
)
#: methods the "Plan" button can run.
PLAN_METHODS: tuple[tuple[str, str], ...] = (("roam", "ROAM (full planner)"), *BASELINE_METHODS)


@dataclass(frozen=True, slots=True)
class PlanSettings:
    """Planner settings chosen in the app (part of the plan cache key)."""

    method: str = "roam"
    time_limit_s: float = 10.0
    node_limit: int = 60
    workers: int = 1
    alignment_bytes: int = 512

    def as_dict(self) -> dict[str, str | float | int]:
        """Plain dict (JSON-able)."""
        return dataclasses.asdict(self)

    def problems(self) -> list[str]:
        """What is wrong with these settings, in words (empty when they are usable).

        >>> PlanSettings(time_limit_s=-5, workers=0).problems()
        ['time limit must be more than 0 s (got -5 s)', 'workers must be at least 1 (got 0)']
        """
        out = []
        if not self.time_limit_s > 0:
            out.append(f"time limit must be more than 0 s (got {self.time_limit_s:g} s)")
        if self.node_limit < 1:
            out.append(f"node limit must be at least 1 (got {self.node_limit})")
        if self.workers < 1:
            out.append(f"workers must be at least 1 (got {self.workers})")
        if self.alignment_bytes < 1:
            out.append(f"alignment must be at least 1 byte (got {self.alignment_bytes})")
        return out


#: A number field of the plan-settings form as Dash sends it (empty: ``None`` or ``""``).
FormNumber = float | int | str | None


def settings_from_form(method: str | None, time_limit: FormNumber, node_limit: FormNumber,
                       workers: FormNumber, alignment: FormNumber) -> PlanSettings:
    """The plan-settings form as :class:`PlanSettings`: the one parser of that form.

    An empty field takes 1 (and an empty method ``"roam"``); the Plan card, the Budget view
    and What fits all read the form through this function.

    Raises
    ------
    ConfigError
        Saying, in words, what is wrong (:meth:`PlanSettings.problems`).

    Examples
    --------
    >>> settings_from_form("eager", 2.5, 60, None, "512")
    PlanSettings(method='eager', time_limit_s=2.5, node_limit=60, workers=1, alignment_bytes=512)
    >>> settings_from_form(None, 0, 60, 1, 512)
    Traceback (most recent call last):
    ...
    roam_core.base.errors.ConfigError: time limit must be more than 0 s (got 0 s)
    """
    def number(value: FormNumber) -> float:
        return 1.0 if value is None or value == "" else float(value)

    settings = PlanSettings(method or "roam", number(time_limit), int(number(node_limit)),
                            int(number(workers)), int(number(alignment)))
    bad = settings.problems()
    if bad:
        raise ConfigError("; ".join(bad))
    return settings
