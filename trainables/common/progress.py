"""How a run tells a person what it is doing. The training loop and the search both write progress lines,
and trainables/ may not import tuner/, so the one copy lives here and tuner/ imports it."""

from __future__ import annotations

import math
import sys

UNKNOWN = "—"  # a duration not known, as the reports' tables write it


def log(line: str) -> None:
    """One progress line on stderr, flushed at once (Ray forwards a worker's stderr as it comes)."""
    print(line, file=sys.stderr, flush=True)


def fmt_seconds(seconds: float | None) -> str:
    """A duration as a person reads it: 4s, 1m 05s, 2h 02m 05s (to the second; a negative one is 0s;
    None, NaN or infinity: UNKNOWN). The one formatter of the progress lines and the reports."""
    if not isinstance(seconds, int | float) or isinstance(seconds, bool) or not math.isfinite(seconds):
        return UNKNOWN
    minutes, secs = divmod(round(max(0.0, seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h {minutes:02d}m {secs:02d}s"
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"


def per_second(unit: str = "tokens") -> str:
    """A speed's unit as every line and report writes it: tok/s for a language model's tokens, else the
    workload's own unit: images/s, examples/s."""
    return "tok/s" if unit == "tokens" else f"{unit}/s"


def one_of(unit: str = "tokens") -> str:
    """One of a unit, for 'FLOPs per token' and the like: tokens -> token, images -> image."""
    return unit[:-1] if unit.endswith("s") and len(unit) > 1 else unit


def metrics_text(metrics: dict[str, float] | None) -> str:
    """A workload's own val figures after a val loss: ', accuracy 0.9712' ("" where it has none)."""
    return "".join(f", {name} {value:.4g}" for name, value in (metrics or {}).items())
