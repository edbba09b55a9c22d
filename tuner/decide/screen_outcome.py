"""How the screen ended, in one line: how many configs it finished, stopped or lost and why, and, where it
finished none, what to change (summary.json's `nothing_screened`, exit 6)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypeGuard

from tuner.state.records import FAILED_STATUSES, TrialRow


def finite(x: Any) -> TypeGuard[float]:
    """A measured figure: a number, not None or NaN (a run that never reached a steady step)."""
    return isinstance(x, int | float) and math.isfinite(x)


@dataclass(frozen=True, kw_only=True)
class ScreenOutcome:
    """How the screen's trials ended: `finished` measured a speed to the end; `stopped_early` were stopped
    as clearly slower; `compiling` were stopped before a timed step (still compiling or warming up, at the
    time budget's end); `waiting` never started; `failed` ran out of memory, went NaN, errored or timed out."""

    total: int
    finished: int
    stopped_early: int
    compiling: int
    waiting: int
    failed: dict[str, int]  # status -> how many

    @classmethod
    def of(cls, rows: Iterable[TrialRow]) -> ScreenOutcome:
        rows = list(rows)
        stopped = [r for r in rows if r.status == "stopped"]
        unmeasured = [r for r in stopped if not finite(r.tokens_per_s)]
        failed: dict[str, int] = {}
        for row in rows:
            if row.status in FAILED_STATUSES:
                failed[row.status] = failed.get(row.status, 0) + 1
        return cls(
            total=len(rows),
            finished=sum(1 for r in rows if r.status == "ok" and finite(r.tokens_per_s)),
            stopped_early=len(stopped) - len(unmeasured),
            compiling=sum(1 for r in unmeasured if r.pid is not None or r.node is not None),
            waiting=sum(1 for r in unmeasured if r.pid is None and r.node is None),
            failed=failed,
        )

    def line(self, budget_s: float | None) -> str:
        """The screen's end in one line: how many configs it finished, and why none where it finished none."""
        if not self.finished:
            return nothing_screened(self, budget_s) or "the screen finished 0 configs"
        parts = [f"{self.stopped_early} stopped early" if self.stopped_early else ""]
        parts.append(
            f"{self.compiling + self.waiting} stopped before a timed step"
            if self.compiling + self.waiting
            else ""
        )
        parts.append(f"{sum(self.failed.values())} failed" if self.failed else "")
        rest = ", ".join(p for p in parts if p)
        return f"the screen finished {self.finished} of {self.total} configs" + (f" ({rest})" if rest else "")


def nothing_screened(outcome: ScreenOutcome, budget_s: float | None) -> str | None:
    """Why the screen finished no config, in the user's terms, with what to do; None where it finished one.
    Then only the baseline was loss-checked and re-measured: 'no config passed the loss check' would blame a
    check no config reached (exit 6, not 3)."""
    if outcome.finished:
        return None
    head = (
        f"the screen finished 0 of {outcome.total} configs"
        if outcome.total
        else "the screen finished 0 configs"
    )
    still = [f"{outcome.compiling} {_were(outcome.compiling)} still compiling" if outcome.compiling else ""]
    still.append(
        f"{outcome.waiting} {'had' if outcome.compiling else _had(outcome.waiting)} not started"
        if outcome.waiting
        else ""
    )
    still_text = " and ".join(s for s in still if s)
    if not outcome.total and budget_s is not None:
        still_text = "no trial had started"  # Ray was still starting the first trials' workers
    if still_text and budget_s is not None:
        return (
            f"{head}: its time budget ({budget_s:.0f} s) ended while {still_text}; raise --time-budget "
            f"(e.g. --time-budget {_more_time(budget_s)})"
        )
    if still_text:
        return f"{head}: they were stopped before a timed step ({still_text})"
    if outcome.failed:
        kinds = ", ".join(f"{n} {FAILED_WORDS.get(status, status)}" for status, n in outcome.failed.items())
        return f"{head}: every trial failed ({kinds}); report.md says why each one failed"
    return f"{head}: it ran no trial"


FAILED_WORDS = {
    "oom": "out of memory",
    "nan": "NaN loss",
    "error": "errored",
    "timeout": "over the compile deadline",
}


def _were(n: int) -> str:
    return "trial was" if n == 1 else "trials were"


def _had(n: int) -> str:
    return "trial had" if n == 1 else "trials had"


def _more_time(budget_s: float) -> str:
    """A budget that lets the first compiles finish: at least 10 minutes, else three times this one."""
    return f"{max(10, math.ceil(3 * budget_s / 60))}m"
