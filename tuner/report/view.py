"""The summary as both reports show it: one entry per distinct config, the answer and why the rest lost.

report.md and report.html take every number, verdict and reason from here (and from measured.py and
cost_section.py, which word how each number was measured and what the planned run costs), so the two never
disagree. Reads a typed Summary only, so a report can be rebuilt from a saved summary.json.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from trainables.progress import metrics_text, one_of, per_second
from tuner.report.cost_section import planned_run
from tuner.report.fmt import (
    DASH,
    as_summary,
    changed,
    fmt_loss,
    fmt_mem,
    fmt_tps,
    fmt_warmup,
    is_num,
    knobs_text,
    limit_text,
    one_run_text,
    over_limit,
    short_ids,
)
from tuner.report.gpu_section import Gpus, gpus
from tuner.report.measured import Facts, Trained, hows
from tuner.report.mfu import fmt_mfu, mfu_at, shown
from tuner.report.mfu import how as mfu_how
from tuner.report.rows import ConfigRow, Trust, group_rows, loss_run, records_sharing, worst
from tuner.report.trust import CONTENDED, MARKS, NOTES, UNTRUSTED_ANSWER, UNTRUSTED_FIGURES
from tuner.report.trust import CONTENDED_NOTE as CONTENDED_NOTE  # the table's note, as view's
from tuner.state.records import BASELINE_ID, FAILED_STATUSES, Summary, TrialRow

TABLE_COLUMNS = (
    "Config",
    "Batch",
    "Workers",
    "Precision",
    "Compile",
    "Kernels",
    "Tok/s",
    "MFU",
    "Warm-up",
    "VRAM",
    "Loss",
    "vs baseline",
)
# Knob shown in each table column after "Config".
COLUMN_KNOBS = ("batch_size", "num_workers", "precision", "compile", "kernels")
GPU_COLUMNS = ("VRAM", "J/token")  # left out of a search on CPUs: no GPU memory, no GPU energy
MFU_COLUMN = "MFU"  # left out too where no run counted its FLOPs (summaries from before MFU)
FAILED_IN = {"loss_check": " in its loss check", "remeasure": " while re-measured"}
# Hardware entries about the hybrid's fused kernels (their libraries, their autotune set): listed only for a
# workload that implements `kernels`.
KERNEL_HARDWARE = ("backends", "autotune_set")


def tps_text(e: Entry) -> str:
    """The entry's tok/s as the tables show it, with its trust mark."""
    return fmt_tps(e.tps) + mark(e)


def mark(e: Entry | None) -> str:
    """The trust mark of an entry's tok/s (" (contended)"), "" where it is trusted or has none."""
    return MARKS[e.tps_trust] if e is not None and e.tps is not None else ""


def mfu_text(e: Entry | None) -> str:
    """' at 7.1% MFU', after an entry's tok/s in a sentence ("" where it has none)."""
    return f" at {fmt_mfu(e.mfu)} MFU" if e is not None and e.mfu is not None else ""


def speedup_text(e: Entry, times: str = "x") -> str:
    """The entry's speed-up, marked with the worse trust of its figure and the baseline's (the denominator)."""
    if e.speedup is None:
        return DASH
    return f"{e.speedup:.2f}{times}" + MARKS[e.speedup_trust]


def trust_notes(entries: list[Entry]) -> list[str]:
    """The notes that explain the marks the table shows, one per kind of mark."""
    shown = {e.tps_trust for e in entries if e.tps is not None}
    shown |= {e.speedup_trust for e in entries if e.speedup is not None}
    return [note for trust, note in NOTES.items() if trust in shown]


# --- why a config lost --------------------------------------------------------------------------------------


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
        if over_limit(loss, loss_limit):
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
        return f"stopped early: slower than the early-stop threshold ({tps} {per_s})"
    if row.feasible is None:
        best = summary.best.tokens_per_s if summary.best else None
        if best and (row.median("tokens_per_s") or 0) > best:  # faster, but never loss-checked
            return f"its loss was never checked (search.loss_check_top reached): {tps} {per_s} in the screen"
        return f"slower ({tps} {per_s} in the screen): its loss was never checked"
    if any(t.phase_name == "remeasure" for t in row.trials):
        return f"re-measured at {tps} {per_s} but not chosen"
    return f"slower ({tps} {per_s} in the screen): not among the re-measured finalists"


# --- the entries both reports list --------------------------------------------------------------------------


@dataclass
class Entry:
    """One distinct config as the reports show it: its values, how each was measured, and its verdict."""

    label: str
    role: str  # "baseline", "winner" or "other"
    config: dict[str, Any]  # every table knob, the baseline's where the config leaves it out
    changes: dict[str, tuple[Any, Any]]  # knob -> (baseline value, this value), over all knobs
    status: str
    feasible: bool | None
    tps: float | None
    tps_trust: Trust  # contended or unjudged: marked wherever the figure is shown
    mfu: float | None  # model FLOPs utilisation at tps (tuner/report/mfu.py)
    warmup: float | None  # compile + warm-up seconds: warm (re-measure) where it has them, else its screen's
    loss: float | None
    trained: Trained | None  # the execution its loss figure was trained with (None: not recorded)
    mem: float | None
    jpt: float | None
    speedup: float | None  # over the baseline's figure of the same kind (re-measured or screened)
    speedup_trust: Trust  # the worse of its figure's and that baseline figure's
    how: dict[str, str]  # "tps", "warmup", "loss", "mem", "jpt" -> how that number was measured
    reason: str  # why it lost ("" for the winner and for a baseline that stays)
    same_as: list[str]  # other screen trials that proposed this same config
    unit: str = "tokens"  # what its speed counts: the workload's unit (summary.json's)

    @property
    def per_s(self) -> str:
        """Its speed's unit as the reports write it: tok/s, images/s."""
        return per_second(self.unit)

    @property
    def failed(self) -> bool:
        return self.status in FAILED_STATUSES

    @property
    def tps_contended(self) -> bool:
        return self.tps_trust == "contended"

    @property
    def verdict(self) -> str:
        if self.role != "other":
            return self.role
        if self.failed or self.status == "stopped":
            return self.status
        return {True: "feasible", False: "infeasible", None: "loss not checked"}[self.feasible]

    def changed_knobs(self, leave_out: tuple[str, ...] = ()) -> str:
        """The knobs it sets to other values than the baseline's: batch_size=512, lr=0.003."""
        return knobs_text({k: new for k, (_, new) in self.changes.items() if k not in leave_out})

    @property
    def tooltip(self) -> str:
        changes = ", ".join(f"{k}: {old} → {new}" for k, (old, new) in self.changes.items())
        parts = [self.label, changes or "the baseline's config", f"{fmt_tps(self.tps)} {self.per_s}"]
        parts += [f"val loss {fmt_loss(self.loss)}", self.verdict]
        parts.append(f"same config as {', '.join(self.same_as)}" if self.same_as else "")
        return " · ".join(p for p in parts if p)


def _first_num(*values: float | None) -> float | None:
    return next((v for v in values if is_num(v)), None)


def _trained(summary: Summary, row: ConfigRow, role: str) -> Trained | None:
    run, base = loss_run(row, summary), summary.baseline
    if role == "baseline":
        return Trained.of(run, base.config, base.loss_execution, baseline=True)
    trained = Trained.of(run, base.config)
    if trained and trained.twin in row.ids:  # its own execution: no one else's to name
        return Trained(trained.knobs, None, baseline=False)
    return trained


def _warmup(summary: Summary, row: ConfigRow, label: str) -> float | None:
    """The finalist's warm figure (the costs section's) where it is one, else the table's runs'."""
    finalist = next((f for f in summary.finalists if f.id == label), None)
    return _first_num(finalist.warmup_s if finalist else None, row.median("warmup_s"))


@dataclass(frozen=True)
class Ratio:
    """A config's speed-up and its trust; `versus` says which baseline figure it divides by."""

    value: float | None
    trust: Trust
    versus: str


def _ratio(summary: Summary, row: ConfigRow, base_row: ConfigRow, judging: bool) -> Ratio:
    """The one home of the "vs baseline" column: a figure over the baseline's of the same kind, a
    re-measured median over the baseline's re-measured median, a screen figure over the baseline config's
    own screen run; none where the baseline has no figure of that kind (a screen figure over a re-measured
    one divides a few steps under other runs' compiles by a quiet window: 0.06x said nothing)."""
    phases, tps = row.speed_phases(), row.median("tokens_per_s")
    own = row.speed_trust(judging)
    if phases == ("remeasure",):
        base_tps, base_trust = summary.baseline.tokens_per_s, base_row.speed_trust(judging, phases)
        versus = f"the baseline's re-measured median ({fmt_tps(base_tps)} {per_second(summary.unit)})"
    else:
        base_tps = base_row.median("tokens_per_s", phases) if phases else None
        base_trust = base_row.speed_trust(judging, phases) if phases else "trusted"
        versus = f"the baseline config's own screen run ({fmt_tps(base_tps)} {per_second(summary.unit)})"
    if not (is_num(tps) and is_num(base_tps) and base_tps > 0):
        what = "re-measured" if phases == ("remeasure",) else "screened"
        return Ratio(None, "trusted", f"no ratio: the baseline config was not {what} as this config was")
    return Ratio(tps / base_tps, worst(own, base_trust), f"÷ {versus}")


def _entry(
    summary: Summary, facts: Facts, row: ConfigRow, role: str, reason: str, base_row: ConfigRow
) -> Entry:
    judging = records_sharing(summary)
    tps, loss, trust = row.median("tokens_per_s"), row.val_loss, row.speed_trust(judging)
    ratio = _ratio(summary, row, base_row, judging)
    if role == "baseline":
        tps, loss = _first_num(summary.baseline.tokens_per_s, tps), facts.base_loss
        ratio = Ratio(1.0, trust, "the baseline itself")
    elif role == "winner" and summary.best:
        best = summary.best
        tps, loss = _first_num(best.tokens_per_s, tps), _first_num(best.val_loss, loss)
        if is_num(best.speedup):  # the selection's own ratio: re-measured medians both
            base_trust = base_row.speed_trust(judging, ("remeasure",))
            ratio = Ratio(best.speedup, worst(trust, base_trust), "÷ the baseline's re-measured median")
    base_cfg, trained = summary.baseline.config, _trained(summary, row, role)
    label = BASELINE_ID if role == "baseline" else row.label
    how = hows(row, role, facts, trained)
    speed_runs = row.runs("tokens_per_s") or row.trials
    return Entry(
        label=label,
        role=role,
        config={k: row.config.get(k, base_cfg.get(k)) for k in COLUMN_KNOBS},
        changes=changed(row.config, base_cfg),
        status=row.status,
        feasible=True if role == "baseline" else row.feasible,
        tps=tps,
        tps_trust=trust,
        mfu=mfu_at(tps, speed_runs),
        warmup=_warmup(summary, row, label),
        loss=_first_num(loss),
        trained=trained,
        mem=row.peak_mem_mb,
        jpt=row.median("joules_per_token"),
        speedup=_first_num(ratio.value),
        speedup_trust=ratio.trust,
        how={**how, "speedup": f"{how['tps']}; {ratio.versus}", "mfu": mfu_how(speed_runs, how["tps"])},
        reason=reason,
        same_as=[t.id for t in row.trials[1:] if t.phase_name == "screen"],
        unit=summary.unit,
    )


@dataclass
class View:
    """What both reports show: the summary, how it was measured, and its configs in report order."""

    summary: Summary
    facts: Facts
    entries: list[Entry]  # baseline first, then the winner, the rest by speed, failed configs last

    @classmethod
    def of(cls, summary: Summary | Mapping[str, Any]) -> View:
        summary = as_summary(summary)
        facts = Facts.of(summary)
        baseline, rows, winner = group_rows(summary)
        base_reason = rejection(baseline, summary) if winner else ""
        entries = [_entry(summary, facts, baseline, "baseline", base_reason, baseline)]
        for row in rows:
            role = "winner" if row is winner else "other"
            reason = "" if row is winner else rejection(row, summary)
            entries.append(_entry(summary, facts, row, role, reason, baseline))
        return cls(summary, facts, entries)

    def columns(self, head: tuple[str, ...]) -> tuple[str, ...]:
        """The table's columns: `head` without VRAM and J/token where the search ran on CPUs, and without
        the knobs the workload does not implement (Kernels for a model without fused kernels)."""
        knob_of = dict(zip(TABLE_COLUMNS[1:], COLUMN_KNOBS))
        off = {c for c, k in knob_of.items() if k in self.summary.knobs_left_out}
        off |= set() if self.facts.gpu_columns else set(GPU_COLUMNS)
        off |= set() if shown(self.summary, self.facts.gpu_columns) else {MFU_COLUMN}
        return tuple(c for c in head if c not in off)

    def heading(self, column: str) -> str:
        """A column's heading in the workload's unit: Tok/s -> Images/s, J/token -> J/image."""
        unit = self.summary.unit
        if unit == "tokens":
            return column
        return {"Tok/s": f"{unit[:1].upper()}{unit[1:]}/s", "J/token": f"J/{one_of(unit)}"}.get(
            column, column
        )

    @property
    def hardware(self) -> list[tuple[str, Any]]:
        """The hardware as both reports list it, the fused kernels' libraries only where the workload has
        fused kernels."""
        off = KERNEL_HARDWARE if "kernels" in self.summary.knobs_left_out else ()
        return [(key, value) for key, value in self.summary.hardware.items() if key not in off]

    @cached_property
    def gpus(self) -> Gpus | None:
        return gpus(self.summary)

    @property
    def notices(self) -> list[str]:
        """The search's notices (node ids cut short), then GPUs of a host that differ beyond the noise."""
        gpu_notices = self.gpus.notices if self.gpus else []
        return [short_ids(n) for n in self.summary.notices] + gpu_notices

    @property
    def baseline(self) -> Entry:
        return self.entries[0]

    @property
    def winner(self) -> Entry | None:
        return next((e for e in self.entries if e.role == "winner"), None)

    @property
    def losers(self) -> list[Entry]:
        return [e for e in self.entries if e.role == "other"]

    @property
    def run_command(self) -> str:
        return f"python -m trainables.train --config {self.summary.best_yaml or 'OUT/best.yaml'}"

    @property
    def cache_note(self) -> str:
        """What "Run it" says of the compile cache best.yaml names ("" when it names none)."""
        cache = self.summary.compile_cache
        if not cache:
            return ""
        pick = self.winner or self.baseline
        warm = f" (~{fmt_warmup(pick.warmup)} with them warm)" if pick.warmup is not None else ""
        return (
            f"best.yaml names the search's compile cache (`compile_cache: {cache}`), so this run reuses the "
            f"Inductor/Triton kernels the search compiled and pays the warm compile + warm-up{warm}, where "
            "that folder is reachable and torch and the GPU are the same."
        )

    @property
    def changes(self) -> dict[str, tuple[Any, Any]]:
        """What the recommended config changes from the baseline (empty when the baseline stays)."""
        best = self.summary.best
        return changed(best.config, self.summary.baseline.config) if best else {}

    @property
    def answer(self) -> str:
        """The reports' first sentences, with markdown emphasis: the winner against the baseline, or no
        change; which execution trained each loss figure; what the planned run takes."""
        summary, base, loss_limit = self.summary, self.baseline, self.summary.loss_limit
        limit = limit_text(loss_limit)
        # the speed with its unit (tok/s, images/s: the workload's)
        base_tps, base_loss = (
            f"{fmt_tps(base.tps)} {base.per_s}{mark(base)}",
            fmt_loss(summary.baseline.val_loss),
        )
        after = planned_run(summary, mark(self.winner or base))  # the time to train from the answer's speed
        said = self._answer(base_tps, base_loss, limit, after)
        said = f"{UNTRUSTED_FIGURES} {said}" if untrusted(self) and not summary.refused else said
        if summary.remembered:
            return f"{confirmed_line(self.summary.remembered)} {said}"
        return said

    @property
    def _base_metrics(self) -> str:
        """', accuracy 0.9861': the workload's own val figures of the baseline ("" where it has none)."""
        return metrics_text(self.summary.baseline.val_metrics)

    def _answer(self, base_tps: str, base_loss: str, limit: str, after: str) -> str:
        summary, base, winner = self.summary, self.baseline, self.winner
        best = summary.best
        if summary.nothing_screened:
            return (
                f"**{summary.nothing_screened[0].upper()}{summary.nothing_screened[1:]}.** Only the baseline "
                f"was loss-checked and re-measured; it ({base_tps}, val loss {base_loss}{self._base_metrics}) "
                "stays the "
                "answer (exit 6)."
            )
        if summary.refused:
            return (
                f"{UNTRUSTED_ANSWER} The baseline ({base_tps}, val loss {base_loss}{self._base_metrics}) stays "
                "the answer."
            )
        if not best or not changed(best.config, summary.baseline.config):
            trained = f" Its loss run was {base.trained.sentence}." if base.trained else ""
            return (
                "No config beat the baseline within tolerance; the baseline "
                f"({base_tps}{mfu_text(base)}, val loss {base_loss}{self._base_metrics}) stays the answer "
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


def untrusted(report: View) -> bool:
    """Whether a speed figure the answer gives rests on untrusted windows: summary.json says so, or (one
    written before `untrusted` covered the baseline's) the baseline's or the winner's is marked contended."""
    said = [e for e in (report.baseline, report.winner) if e is not None]
    return report.summary.untrusted or any(mark(e) == CONTENDED for e in said)


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


def loss_cell(e: Entry, facts: Facts) -> tuple[str, str]:
    """(the loss, marked when over the limit; the execution that trained it, "" where not recorded)."""
    value = fmt_loss(e.loss) + (" (over limit)" if facts.over_limit(e.loss) else "")
    return value, e.trained.sentence if e.trained and e.loss is not None else ""


def confirmed_line(was: dict[str, str]) -> str:
    """The top line of a confirmation's report: the earlier search it took its screen from, and where its
    evidence is."""
    return (
        f"**A confirmation:** this search matched one finished on {was['when']} ({was['out']}); its probe, "
        "screen and loss check were taken from it, and its finalists and the baseline re-measured now. "
        f"The evidence they rest on (trial folders, ledgers, Optuna journal) is in {was['out']}."
    )
