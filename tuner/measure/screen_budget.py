"""The screen's wall budget and its clock, set from the search's config and hardware: the clock itself
(when the screen stops proposing and when it ends) is tuner/runs/screen_clock.py, which the runs read."""

from __future__ import annotations

from typing import Any

from trainables.common.progress import log
from tuner.config import SearchSection
from tuner.runs.screen_clock import ScreenClock
from tuner.space.knobs import freeze


def wall_budget_s(search: SearchSection, gpus: int) -> float | None:
    """`search.time_budget` is GPU time: N GPUs screen N configs at once, so they spend it in 1/N of the
    wall time, and finish as many proposals as one GPU would in the whole budget. Its floor is not a
    constant: the screen ends only once its start points are done (screen_clock). `gpus`: the trials'."""
    s = search
    if s.time_budget_s is None:
        return None
    gpus = max(1, gpus)
    wall = s.time_budget_s / gpus
    if gpus > 1:
        log(
            f"[screen] time budget {s.time_budget} of GPU time over {gpus} GPUs: {wall:.0f} s of wall time, "
            "longer only while a start point is still running"
        )
    return wall


def screen_clock(
    search: SearchSection,
    budget_s: float | None,
    points: list[dict[str, Any]],
) -> ScreenClock | None:
    """The screen ends at its budget once no start point is running, and at its budget plus the compile
    deadline regardless (a trial gives up its first step by then; one of the start points that has its place
    is waited for)."""
    if budget_s is None:
        return None
    deadline = search.compile_deadline_s
    cap = budget_s + (deadline or budget_s)
    return ScreenClock(budget_s=budget_s, cap_s=cap, first_wave=frozenset(map(freeze, points)))
