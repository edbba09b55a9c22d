"""How the winner was chosen (tuner/decide/select.py decides it): summary.json's `selection`, a record stored by
tuner/state/records.py's Summary, in its own module so that records.py does not grow past its size. Its `tied`
is the one source of what the reports say of a tie: which finalists were within the spread of the fastest,
and why the one chosen among them won."""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, model_validator

from tuner.rules.record_base import Record

# How select.finish_first began the rejection of the faster finalist, in summaries from before
# `finishes_later` recorded it; read only to migrate those.
_OLDER_FINISH_FIRST = "faster once running, but"
# How select.pick_winner worded a tie, in summaries from before `tied` recorded it: each tied finalist's
# rejection, and the reason that says why the chosen one won.
_OLDER_TIED = re.compile(r"^tied with (\S+) \(ranges overlap\)")
_OLDER_TIE_BREAK = re.compile(r" overlap \(.*\); chose (\S+): (.+)$")


class SelectionResult(Record):
    reasons: list[str] = Field(default_factory=list)
    telemetry_changed_decision: bool = False
    rejected: dict[str, str] = Field(default_factory=dict)
    finishes_later: str | None = Field(
        None,
        description="the finalist that runs faster once warmed up but finishes the planned run (train.tokens) "
        "later, compile + warm-up included, so the one that finishes first was chosen over it",
    )
    tied: list[str] = Field(
        default_factory=list,
        description="a tie: the feasible finalists whose re-measured ranges overlap the fastest's, the one the "
        "tie chose first (empty: no other config was within the fastest's spread)",
    )
    tie_break: str | None = Field(
        None, description="why the tie chose tied[0] (fewer non-default knobs, ...)"
    )

    @model_validator(mode="before")
    @classmethod
    def _older_finish_first(cls, data: Any) -> Any:
        """Summaries from before `finishes_later` said it only in that finalist's rejection: read it there."""
        if not isinstance(data, dict) or "finishes_later" in data:
            return data
        rejected = data.get("rejected") or {}
        later = next((i for i, why in rejected.items() if why.startswith(_OLDER_FINISH_FIRST)), None)
        return {**data, "finishes_later": later}

    @model_validator(mode="before")
    @classmethod
    def _older_tie(cls, data: Any) -> Any:
        """Summaries from before `tied` said a tie only in its losers' rejections and a reason: read it there,
        so their reports say the tie as a new one's do."""
        if not isinstance(data, dict) or "tied" in data:
            return data
        found = {
            fid: m.group(1)
            for fid, why in (data.get("rejected") or {}).items()
            if (m := _OLDER_TIED.match(why))
        }
        chosen = next(iter(found.values()), None)
        if chosen is None:
            return data
        breaks = [m for why in data.get("reasons") or [] if (m := _OLDER_TIE_BREAK.search(why))]
        tie_break = next((m.group(2) for m in breaks if m.group(1) == chosen), None)
        losers = [fid for fid, winner in found.items() if winner == chosen]
        return {**data, "tied": [chosen, *losers], "tie_break": tie_break}
