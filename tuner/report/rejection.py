"""Why a config lost, in one sentence, most decisive cause first: the reports' "Why others were rejected"."""

from __future__ import annotations

from trainables.common.progress import per_second
from tuner.report.fmt import fmt_loss, fmt_mem, fmt_tps, over_limit
from tuner.report.rows import ConfigRow, records_sharing
from tuner.state.records import Summary, TrialRow

FAILED_IN = {"loss_check": " in its loss check", "remeasure": " while re-measured"}


def _failure_reason(row: ConfigRow, failure: TrialRow) -> str:
    where = FAILED_IN.get(failure.phase_name, "")
    if failure.status == "oom":
        peak = f" (peak {fmt_mem(row.peak_mem_mb)})" if row.peak_mem_mb else ""
        return f"out of memory{where}{peak}"
    if failure.status == "nan":
        return f"the loss became NaN{where}"
    if failure.status == "timeout":
        return f"gave up compiling{where}: {failure.error or 'over the compile deadline'} (search.compile_deadline)"
    lines = (failure.error or "").strip().splitlines()
    return f"error{where}: {lines[-1] if lines else 'no message'}"


def rejection(row: ConfigRow, summary: Summary) -> str:
    """Why `row` lost, most decisive cause first."""
    if row.failure:
        return _failure_reason(row, row.failure)
    loss_limit, tps = summary.loss_limit, fmt_tps(row.median("tokens_per_s"))
    per_s = per_second(summary.unit)
    via = f" (loss run of {row.checked_by})" if row.checked_by and row.checked_by not in row.ids else ""
    if row.feasible is False:
        loss = row.val_loss
        if loss is not None and loss_limit is not None and over_limit(loss, loss_limit):
            over = f"{fmt_loss(loss_limit.limit)} by {loss - loss_limit.limit:.4f}"
            return f"val loss {fmt_loss(loss)} over the limit {over}{via}"
        return f"loss check failed{via}"
    rejected = summary.selection.rejected
    reason = next((rejected[tid] for tid in row.ids if tid in rejected), None)
    if reason:
        return reason
    if row.status == "stopped" and row.median("tokens_per_s") is None:
        # the early stop needs a speed: this one was ended by the screen's time budget (or the search's stop)
        return "stopped before its first timed step, while it compiled or warmed up: never measured"
    if row.status == "stopped":
        return _stopped(row, summary, f"{tps} {per_s}")
    if row.feasible is None:
        return _never_checked(row, summary, f"{tps} {per_s}")
    if any(t.phase_name == "remeasure" for t in row.trials):
        return f"re-measured at {tps} {per_s} but not chosen"
    return f"slower ({tps} {per_s} in the screen): not among the re-measured finalists"


def _never_checked(row: ConfigRow, summary: Summary, speed: str) -> str:
    """Why no loss run checked `row`: what summary.json's loss_check says of it (the record the loss check
    ended with, which the report's note of its cap reads too); a summary from before that record only knew
    the cap of search.loss_check_top."""
    outcome = summary.loss_check
    if outcome is not None:
        why = outcome.unchecked_why(row.ids)
        if why:
            return f"its loss was never checked: {why}; {speed} in the screen"
        return f"slower ({speed} in the screen): its loss was never checked"
    best = summary.best.tokens_per_s if summary.best else None
    if best and (row.median("tokens_per_s") or 0) > best:  # faster, but never loss-checked
        return f"its loss was never checked (search.loss_check_top reached): {speed} in the screen"
    return f"slower ({speed} in the screen): its loss was never checked"


# What a stopped run's untrusted figure says of the early stop (rows.Trust): the table marks the figure alike.
STOPPED_ON = {
    "contended": "timed while other processes used the machine",
    "unjudged": "its window recorded nothing of who else used the machine",
}


def _stopped(row: ConfigRow, summary: Summary, speed: str) -> str:
    """Why the screen stopped `row` early: its figure was under the early-stop threshold; where that figure
    is one the table marks contended or unjudged (the same trust), the stop rests on it, and alone the config
    may have been faster."""
    trust = row.speed_trust(records_sharing(summary))
    if trust in STOPPED_ON:
        return (
            f"stopped early on a {trust} figure: {speed}, {STOPPED_ON[trust]}, was under the early-stop "
            f"threshold ({_threshold(summary)}); alone it may have been faster"
        )
    if summary.early_stop_ratio is None:
        return f"stopped early: slower than the early-stop threshold ({speed})"
    return f"stopped early: {speed}, under the early-stop threshold ({_threshold(summary)})"


def _threshold(summary: Summary) -> str:
    """The early-stop threshold, quoting the ratio the screen applied (summary.json's early_stop_ratio); a
    summary from before it was recorded names the setting only."""
    ratio = summary.early_stop_ratio
    if ratio is None:
        return "search.early_stop_ratio x the fastest finished so far"
    return f"{ratio:g} x the fastest finished so far: search.early_stop_ratio"
