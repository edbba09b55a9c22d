"""How many runs each re-measured figure rests on, read from the record the answer was picked from: each
finalist's `runs` (tuner/phases/finish.py, the runs its median is taken over) and the re-measure's rows. The
runs asked (`search.repeats`, `search.baseline_repeats`) are what the re-measure planned, not what a figure
rests on: the baseline's later repeats are left out once its figure can no longer change the answer, and a
contended or failed run is left out of a figure, so "3 runs each" beside a notice that the baseline's figure
"rests on 1 run" said two things of one figure (issue 56)."""

from __future__ import annotations

from typing import Any

from tuner.report.fmt import is_num
from tuner.state.records import BASELINE_ID, Finalist, Summary


def _runs(n: int) -> str:
    return f"{n} run{'' if n == 1 else 's'}"


def _what_became(summary: Summary, finalist: Finalist, asked: int) -> list[str]:
    """What became of the runs asked of `finalist` that its figure does not rest on."""
    rows = [t for t in summary.trials if t.finalist == finalist.id]
    timed = [t for t in rows if t.status == "ok" and is_num(t.tokens_per_s) and t.tokens_per_s]
    out = []
    # the record the notice of them reads; a summary from before it: counted from its rows
    missing = finalist.not_timed if finalist.not_timed is not None else max(0, asked - len(rows))
    if missing:
        why = ", as its figure could no longer change the answer" if finalist.id == BASELINE_ID else ""
        out.append(f"{missing} not timed{why}")
    if len(rows) > asked:
        out.append(f"{len(rows) - asked} more timed again after contended or failed windows")
    if len(rows) > len(timed):
        out.append(f"{len(rows) - len(timed)} failed")
    if finalist.contended_runs:
        out.append(f"{len(finalist.contended_runs)} left out as contended")
    elif timed and all(t.contended for t in timed):
        out.append("every window contended, so all count and the figure is not trusted")
    return out


def rests_on(summary: Summary, repeats: Any, baseline_repeats: Any) -> str:
    """'; the baseline's figure rests on 1 of the 3 runs asked: 2 not timed, ...' for each finalist whose
    figure rests on other than the runs asked of it ("" where every one rests on them, or none is recorded)."""
    parts = []
    for finalist in summary.finalists:
        asked = baseline_repeats if finalist.id == BASELINE_ID else repeats
        used = len(finalist.runs)
        if not isinstance(asked, int) or used == asked:
            continue
        who = "the baseline's" if finalist.id == BASELINE_ID else f"{finalist.id}'s"
        became = _what_became(summary, finalist, asked)
        of = f"{used} of the {_runs(asked)} asked" if used < asked else f"{_runs(used)}, {asked} asked"
        parts.append(f"{who} figure rests on {of}" + (f": {', '.join(became)}" if became else ""))
    return "".join(f"; {part}" for part in parts)


BASELINE_ALONE = "the baseline alone (no other config was a feasible finalist)"


def baseline_alone(summary: Summary) -> bool:
    """Whether the re-measure timed the baseline only (its finalists record says so; older summaries have
    none, and keep their wording)."""
    return bool(summary.finalists) and all(f.id == BASELINE_ID for f in summary.finalists)
