"""Where the answer's step time goes, as both reports say it: one line under the answer, beside its MFU,
from the profile its re-measure runs took after their timed windows (trainables/training/profile.py holds the rules:
compute, memory or launch bound, and 'device' where CUDA graphs hid the kernels from the profiler).

The answer is the winner, else the baseline that stays; its line comes from an uncontended run where one
was profiled. Summaries from before runs were profiled, and runs whose profile failed, give no line.
"""

from __future__ import annotations

from collections.abc import Iterable

from tuner.report.mfu import finalist_runs, fmt_mfu, mfu_at
from tuner.state.records import BASELINE_ID, Summary, TrialRow


def answer_id(summary: Summary) -> str:
    return summary.best.id if summary.best else BASELINE_ID


def profiled_run(runs: Iterable[TrialRow]) -> TrialRow | None:
    """The run whose profile stands for its config: an uncontended one where there is one (a contended
    window's neighbours may have shared its GPU or CPUs during the profile too)."""
    found = [t for t in runs if t.profile is not None and t.status == "ok"]
    return next((t for t in found if not t.contended), found[0] if found else None)


def answer_line(summary: Summary) -> str:
    """'answer: launch-bound (device busy 31% of a step) at 7.0% MFU; top ops: ... (why; how taken)';
    "" where none of the answer's runs was profiled."""
    answer = answer_id(summary)
    runs = finalist_runs(summary, answer)
    run = profiled_run(runs)
    if run is None or run.profile is None:  # profiled_run's has one
        return ""
    found = run.profile
    tps = summary.best.tokens_per_s if summary.best else summary.baseline.tokens_per_s
    mfu = mfu_at(tps, runs)
    beside = f" at {fmt_mfu(mfu)} MFU" if mfu is not None else ""
    why = f"{found.reason}; " if found.busy is not None else ""
    return (
        f"answer: {found.line(beside)} ({why}{found.steps} steps of {run.id} profiled after its timed "
        "window, trainables/training/profile.py)"
    )


def answer_lines(summary: Summary) -> list[str]:
    """The line and a blank one after it, for report.md ([] where there is no line)."""
    line = answer_line(summary)
    return [line, ""] if line else []
