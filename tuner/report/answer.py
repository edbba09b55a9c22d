"""The reports' first sentences: the winner against the baseline or why the baseline stays, which execution
trained each loss figure, what the planned run takes, and whether the figures are trusted."""

from __future__ import annotations

import statistics
from pathlib import Path

from trainables.common.progress import metrics_text
from tuner.report.cost_section import planned_run
from tuner.report.entry import Entry, mark, mfu_text
from tuner.report.fmt import changed, fmt_loss, fmt_tps, is_num, limit_text, one_run_text
from tuner.report.trust import CONTENDED, UNTRUSTED_ANSWER, UNTRUSTED_FIGURES
from tuner.state.records import Finalist, Summary


def answer(summary: Summary, base: Entry, winner: Entry | None) -> str:
    """The reports' first sentences, with markdown emphasis: the winner against the baseline, or no
    change; which execution trained each loss figure; what the planned run takes."""
    said = _answer(summary, base, winner)
    said = f"{UNTRUSTED_FIGURES} {said}" if untrusted(summary, base, winner) and not summary.refused else said
    if summary.remembered:
        return f"{confirmed_line(summary.remembered)} {said}"
    return said


def _answer(summary: Summary, base: Entry, winner: Entry | None) -> str:
    limit, best = limit_text(summary.loss_limit), summary.best
    # the speed with its unit (tok/s, images/s: the workload's)
    base_tps, base_loss = (
        f"{fmt_tps(base.tps)} {base.per_s}{mark(base)}",
        fmt_loss(judged_baseline_loss(summary)),
    )
    base_metrics = metrics_text(summary.baseline.val_metrics)
    after = planned_run(summary, mark(winner or base))  # the time to train from the answer's speed
    if summary.nothing_screened:
        return (
            f"**{summary.nothing_screened[0].upper()}{summary.nothing_screened[1:]}.** Only the baseline "
            f"was loss-checked and re-measured; it ({base_tps}, val loss {base_loss}{base_metrics}) "
            "stays the answer (exit 6)."
        )
    if summary.refused:
        return (
            f"{UNTRUSTED_ANSWER} The baseline ({base_tps}, val loss {base_loss}{base_metrics}) stays "
            "the answer."
        )
    if not best or not changed(best.config, summary.baseline.config):
        trained = f" Its loss run was {base.trained.sentence}." if base.trained else ""
        if tie := tied(summary):
            return (
                f"**A tie:** the baseline ({base_tps}{_range(tie[0])}) and {_others(tie)} are {_within(tie)}; "
                f"the baseline stays the answer (tie break: {summary.selection.tie_break or 'the simplest'}), "
                f"val loss {base_loss}{base_metrics} ({limit}).{trained} {after}"
            ).rstrip()
        return (
            "No config beat the baseline within tolerance; the baseline "
            f"({base_tps}{mfu_text(base)}, val loss {base_loss}{base_metrics}) stays the answer "
            f"({limit}).{trained} "
            f"{after}"
        ).rstrip()
    lo_hi = best.tokens_per_s_spread
    spread = f" (range {fmt_tps(lo_hi[0])}–{fmt_tps(lo_hi[1])})" if len(lo_hi) == 2 else ""
    versus = f"{best.speedup:.2f}x the baseline's" if is_num(best.speedup) else "against the baseline's"
    one_run = f" ({text})" if (text := one_run_text(best)) else ""
    return (
        f"**{best.id}** {_is_the(summary)}: {fmt_tps(best.tokens_per_s)} {base.per_s}{mark(winner)}{spread}"
        f"{mfu_text(winner)}, {versus} "
        f"{base_tps}{one_run}. Its validation loss is {fmt_loss(best.val_loss)} against the baseline's "
        f"{base_loss} ({limit}){_trained_clause(winner, base)}.{_metrics_sentence(best.val_metrics, summary)}"
        f" {after}"
    ).rstrip()


def judged_baseline_loss(summary: Summary) -> float | None:
    """The baseline's loss the limit was built on: the mean of its seeds where it trained at several (the
    limit's sentence names them), else its one loss run's. Quoting the first seed beside a limit built on
    the mean made a 100M report say 1.0032 beside "baseline 1.0136 + 0.05"."""
    limit = summary.loss_limit
    if limit is not None and len(limit.seed_losses) > 1:
        return limit.baseline_loss
    return summary.baseline.val_loss


def untrusted(summary: Summary, base: Entry, winner: Entry | None) -> bool:
    """Whether a speed figure the answer gives rests on untrusted windows: summary.json says so, or (one
    written before `untrusted` covered the baseline's) the baseline's or the winner's is marked contended."""
    said = [e for e in (base, winner) if e is not None]
    return summary.untrusted or any(mark(e) == CONTENDED for e in said)


def _metrics_sentence(mine: dict[str, float] | None, summary: Summary) -> str:
    """' Its accuracy is 0.9833 against the baseline's 0.9861.': the workload's own val figures, beside the
    loss ("" where it reports none)."""
    theirs = summary.baseline.val_metrics or {}
    parts = [
        f"{name} is {value:.4g}" + (f" against the baseline's {theirs[name]:.4g}" if name in theirs else "")
        for name, value in (mine or {}).items()
    ]
    return f" Its {', '.join(parts)}." if parts else ""


def _is_the(summary: Summary) -> str:
    loser = summary.selection.finishes_later
    if loser is None and (tie := tied(summary)):
        why = summary.selection.tie_break or "the simplest"
        return f"is chosen from a tie with {_others(tie)}, {_within(tie)} (tie break: {why})"
    if loser is None:
        return "is the fastest config within tolerance"
    tokens = f" ({summary.planned_tokens:,} {summary.unit})" if summary.planned_tokens else ""
    return (
        f"finishes the planned run{tokens} first among the configs within tolerance ({loser} runs faster "
        "once warmed up, but does not earn back its longer compile + warm-up within the run)"
    )


def _trained_clause(winner: Entry | None, base: Entry) -> str:
    """; the winner's was trained with ..., the baseline's with ...  ("" where neither is recorded)"""
    parts = [f"the {e.role}'s was {e.trained.sentence}" for e in (winner, base) if e and e.trained]
    return f"; {', '.join(parts)}" if parts else ""


def confirmed_line(was: dict[str, str]) -> str:
    """The top line of a confirmation's report: the earlier search it took its screen from, and where its
    evidence is, as the report is written (`python -m tuner.report` rebuilds it after that OUT is deleted)."""
    taken = (
        f"**A confirmation:** this search matched one finished on {was['when']} ({was['out']}); its probe, "
        "screen and loss check were taken from it, and its finalists and the baseline re-measured now. "
    )
    if (Path(was["out"]) / "trials").is_dir():
        return (
            f"{taken}The evidence they rest on (trial folders, ledgers, Optuna journal) is in {was['out']}."
        )
    return (
        f"{taken}The evidence they rest on (trial folders, ledgers, Optuna journal) was in {was['out']}, "
        "which no longer holds it: of the screen and the loss check, only this report's figures remain."
    )


def tied(summary: Summary) -> list[Finalist] | None:
    """The finalists of the tie the answer was chosen from, the chosen one first, with the figures the
    selection compared (summary.selection.tied, summary.finalists); None where the answer was not chosen
    from a tie (or a summary does not record the finalists' runs)."""
    ids, best = summary.selection.tied, summary.best
    if best is None or len(ids) < 2 or ids[0] != best.id:
        return None
    by_id = {f.id: f for f in summary.finalists if f.runs}
    return [by_id[i] for i in ids] if all(i in by_id for i in ids) else None


def _range(f: Finalist) -> str:
    """', range 6,844–9,111' over a finalist's re-measured runs (', one run' where there is no range)."""
    return f", range {fmt_tps(min(f.runs))}–{fmt_tps(max(f.runs))}" if len(f.runs) > 1 else ", one run"


def _others(tie: list[Finalist]) -> str:
    """The tied finalists but the chosen one, each with its median and range."""
    named = [f"{f.id} ({fmt_tps(statistics.median(f.runs))} tok/s{_range(f)})" for f in tie[1:]]
    return ", ".join(named[:-1]) + f" and {named[-1]}" if len(named) > 1 else named[0]


def _within(tie: list[Finalist]) -> str:
    """How the tied ranges meet (select.pick_winner: each overlaps the fastest's)."""
    return "within each other's spread" if len(tie) == 2 else "all within the spread of the fastest"
