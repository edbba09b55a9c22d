"""How the loss check ended (tuner/decide/loss_plan.py decides it): summary.json's `loss_check`, a record
stored by tuner/state/records.py's Summary, in its own module so that records.py does not grow past its size."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tuner.rules.record_base import Record

LossCheckEnd = Literal["all_checked", "max_loss_checks", "loss_check_time", "loss_check_top"]
CAPPED = ("max_loss_checks", "loss_check_time")


class LossCheckOutcome(Record):
    """How the loss check ended (tuner/decide/loss_plan.py): summary.json's `loss_check`."""

    ended_by: LossCheckEnd = Field(
        description="all_checked: every candidate screened faster than the best passing config (or the "
        "baseline) was checked; max_loss_checks: the cap on runs, once a config faster than the baseline "
        "passed; loss_check_time: the estimated time of its runs, while none had; loss_check_top: set to 0"
    )
    runs: int = Field(description="candidates' loss runs (the baseline's not counted)")
    max_runs: int | None = Field(None, description="search.max_loss_checks as applied")
    estimated_s: float | None = Field(
        None, description="those runs' estimated time (tokens / screened speed)"
    )
    time_budget_s: float | None = Field(None, description="search.loss_check_time as applied, in seconds")
    unchecked_faster: list[str] = Field(
        default_factory=list,
        description="screen configs faster than the best passing one (or the baseline) whose loss no run "
        "checked, fastest first",
    )
    ruled_out: list[str] = Field(
        default_factory=list,
        description="screen configs no loss run checked because a failure ruled them out: a larger batch at "
        "the peak lr of a config that failed the limit",
    )

    def cap(self) -> str:
        """The cap that ended the check, as every line that names it says it (the notice, the report's note,
        each unchecked config's rejection): one wording, so two lines never name two caps for one stop."""
        if self.ended_by == "max_loss_checks":
            return f"its cap of {self.max_runs} runs (search.max_loss_checks)"
        if self.ended_by == "loss_check_time":
            return f"its time budget of {self.time_budget_s or 0:.0f} s (search.loss_check_time)"
        if self.ended_by == "loss_check_top":
            return "search.loss_check_top set to 0"
        return "every candidate checked"

    def line(self) -> str | None:
        """One line where a cap or the time budget ended the check with faster configs unchecked."""
        if self.ended_by not in CAPPED or not self.unchecked_faster:
            return None
        names = ", ".join(self.unchecked_faster)
        return (
            f"the loss check ended at {self.cap()} after {self.runs} runs, leaving {len(self.unchecked_faster)} "
            f"config(s) screened faster than its best passing one unchecked: {names}"
        )

    def unchecked_why(self, ids: list[str]) -> str | None:
        """Why no loss run checked the screen config of `ids` (its runs), from this record: the cap that ended
        the check before it, or a failure that ruled it out; None where the record names it in neither."""
        if set(ids) & set(self.ruled_out):
            return "a loss run ruled it out (a larger batch at the peak lr of a config that failed the limit)"
        if set(ids) & set(self.unchecked_faster):
            return f"the loss check ended at {self.cap()} before it"
        return None
