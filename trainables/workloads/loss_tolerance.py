"""A workload's own scale for the loss rule: its optional `loss_tolerance` attribute.

A language model's loss is ~1.5 nats, where 0.05 nats absolute (the search's default) is ~3%; a classifier's
may be 0.06, where 0.05 absolute would allow +80%. A workload may declare the tolerance that fits its loss:

    loss_tolerance = ("relative", 0.05)      # limit = baseline x 1.05
    loss_tolerance = ("absolute", 0.02)      # limit = baseline + 0.02

The search uses it when the config sets neither `quality.tolerance` nor `quality.mode` (a config that sets
either wins: tuner/config.py:QualitySection.with_workload_default), and the report says where it came from.
"""

from __future__ import annotations

import math
from typing import Any

from trainables.config import ConfigError

MODES = ("absolute", "relative")


def declared_tolerance(workload: Any, name: str) -> tuple[str, float] | None:
    """The workload's `loss_tolerance` as (mode, tolerance), checked; None where it declares none.
    ConfigError (one line, naming the attribute: exit 2) for anything else."""
    declared = getattr(workload, "loss_tolerance", None)
    if declared is None:
        return None
    try:
        mode, value = declared
        ok = mode in MODES and isinstance(value, int | float) and not isinstance(value, bool)
        ok = ok and math.isfinite(value) and value >= 0
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ConfigError(
            f"workload {name!r}: loss_tolerance is {declared!r}, expected (mode, tolerance) with mode "
            "'absolute' or 'relative' and a tolerance >= 0, e.g. ('relative', 0.05)"
        )
    return mode, float(value)
