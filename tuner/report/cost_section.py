"""What the planned run costs, as both reports show it: each finalist's compile + warm-up (cold and with the
search's caches warm) and time to train the planned run, and per compile mode the run length after which
its compile has paid for itself (tuner/decide/costs.py computes them; this module only words them)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from tuner.report.fmt import fmt_seconds, fmt_tokens, fmt_tps, fmt_warmup, is_num
from tuner.report.measured import Facts
from tuner.report.mfu import finalist_runs, fmt_mfu, mfu_at, shown
from tuner.state.records import BASELINE_ID, BreakEven, Finalist, Summary

FINALIST_HEAD = ("Finalist", "Tok/s", "Warm-up cold", "Warm-up warm", "Time to train")
FINALIST_HEAD_MFU = ("Finalist", "Tok/s", "MFU", "Warm-up cold", "Warm-up warm", "Time to train")
BREAK_EVEN_HEAD = (
    "Compile (scope)",
    "Config",
    "Tok/s",
    "Against eager",
    "Warm-up cold / warm",
    "Cold",
    "Warm",
)


@dataclass(frozen=True)
class CostRow:
    label: str
    role: str  # "winner", "baseline" or "other"
    cells: list[str]  # after the label


@dataclass(frozen=True)
class Costs:
    """The section "What the planned run costs": a line of what it counts, finalists, break-even."""

    intro: str
    head: tuple[str, ...]  # the finalists' columns: FINALIST_HEAD, with MFU where the search recorded it
    finalists: list[CostRow]
    break_even: list[list[str]]
    break_even_intro: str


def _role(finalist: Finalist, summary: Summary) -> str:
    if summary.best and finalist.id == summary.best.id and finalist.id != BASELINE_ID:
        return "winner"
    return "baseline" if finalist.id == BASELINE_ID else "other"


def _finalist_row(f: Finalist, summary: Summary, with_mfu: bool) -> CostRow:
    tps = statistics.median(f.runs) if f.runs else None
    cells = [
        fmt_tps(tps),
        *([fmt_mfu(mfu_at(tps, finalist_runs(summary, f.id)))] if with_mfu else []),
        fmt_warmup(f.warmup_cold_s),
        fmt_warmup(f.warmup_s) + (f" (beside {f.warmup_beside} warming up)" if f.warmup_beside else ""),
        fmt_seconds(f.time_to_train_s),
    ]
    return CostRow(f.id, _role(f, summary), cells)


def _pays(tokens: float | None, warmup: float | None, be: BreakEven, planned: int | None, times: str) -> str:
    """After how many tokens a compile mode has paid for its compile, and what share of the planned run."""
    if tokens is None:
        if be.tokens_per_s <= be.versus_tokens_per_s:
            return "never: not faster than eager"
        return "not measured" if warmup is None else "never"
    if tokens <= 0:
        return "from the start (no longer warm-up than eager)"
    share = f" ({tokens / planned:.3g}{times} the planned run)" if planned else ""
    return fmt_tokens(tokens) + share


def _break_even_row(be: BreakEven, planned: int | None, times: str) -> list[str]:
    return [
        be.compile + (f" ({be.compile_scope})" if be.compile_scope else ""),
        be.config_id,
        fmt_tps(be.tokens_per_s),
        f"{be.versus_id}: {fmt_tps(be.versus_tokens_per_s)} tok/s",
        f"{fmt_warmup(be.warmup_cold_s)} / {fmt_warmup(be.warmup_warm_s)}",
        _pays(be.tokens_cold, be.warmup_cold_s, be, planned, times),
        _pays(be.tokens_warm, be.warmup_warm_s, be, planned, times),
    ]


def _intro(summary: Summary) -> str:
    planned = summary.planned_tokens
    run = f"The planned run is {planned:,} tokens (train.tokens)" if planned else "The planned run"
    cache = (
        "the warm-up with the search's compile caches warm, as a run of best.yaml pays it (it reuses them)"
        if summary.compile_cache
        else "the warm-up with the search's compile caches warm (this summary names no cache for best.yaml, "
        "so a first run elsewhere pays the cold one)"
    )
    return (
        f"{run}. Time to train = {cache} + tokens ÷ the median re-measured tok/s. Warm-up cold: with an "
        "empty cache (the longest screen run that compiled the same graph; later ones found it cached); "
        "warm: the median of its re-measure runs."
    )


BREAK_EVEN_INTRO = (
    "The run length after which each compile mode's longer compile + warm-up has paid for itself against the "
    "fastest feasible eager config (the baseline when no eager config got through the screen), from their "
    "speed-screen tok/s (the baseline's: re-measured). Cold: an empty compile cache; Warm: the search's "
    "caches warm, as best.yaml's run has them. A shorter run finishes sooner without compile."
)


def costs(summary: Summary, times: str = "x") -> Costs | None:
    """The section's content; None for a summary without finalists' costs or break-evens (older ones)."""
    timed = [f for f in summary.finalists if f.runs or is_num(f.time_to_train_s)]
    if not timed and not summary.break_even:
        return None
    order = {f.id: f.time_to_train_s if is_num(f.time_to_train_s) else math.inf for f in timed}
    with_mfu = shown(summary, Facts.of(summary).gpu_columns)
    rows = sorted(
        (_finalist_row(f, summary, with_mfu) for f in timed),
        key=lambda r: (r.role != "winner", order[r.label]),
    )
    return Costs(
        intro=_intro(summary),
        head=FINALIST_HEAD_MFU if with_mfu else FINALIST_HEAD,
        finalists=rows,
        break_even=[_break_even_row(be, summary.planned_tokens, times) for be in summary.break_even],
        break_even_intro=BREAK_EVEN_INTRO,
    )


def planned_cost(summary: Summary) -> tuple[str, float | None, float | None]:
    """(who answers: the winner's id or "baseline"; its time to train the planned run; its warm warm-up)."""
    best = summary.best
    pick = best.id if best else BASELINE_ID
    finalist = next((f for f in summary.finalists if f.id == pick), None)
    seconds, warmup = (best.time_to_train_s, best.warmup_s) if best else (None, None)
    if finalist:
        seconds = seconds if is_num(seconds) else finalist.time_to_train_s
        warmup = warmup if is_num(warmup) else finalist.warmup_s
    return pick, seconds if is_num(seconds) else None, warmup if is_num(warmup) else None


def planned_run(summary: Summary, mark: str = "") -> str:
    """The answer's last sentence: what the planned run takes with the answer, compile included; `mark`
    after the time where the speed it comes from is not trusted (" (contended)")."""
    pick, seconds, warmup = planned_cost(summary)
    if seconds is None:
        return ""
    tokens = f" ({summary.planned_tokens:,} tokens)" if summary.planned_tokens else ""
    warm = f", {fmt_warmup(warmup)} of it compile + warm-up" if warmup is not None else ""
    who = "the baseline" if pick == BASELINE_ID else pick
    return f"The planned run{tokens} takes ~{fmt_seconds(seconds)}{mark} with {who}{warm}."
