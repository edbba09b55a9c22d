"""One distinct config as both reports show it (Entry): its figures, how each was measured, its speed-up over
the baseline, and the marks and cells its figures are shown with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainables.common.progress import per_second
from tuner.report.fmt import DASH, changed, fmt_loss, fmt_tps, is_num, knobs_text
from tuner.report.measured import Facts, Trained, hows
from tuner.report.mfu import fmt_mfu, mfu_at
from tuner.report.mfu import how as mfu_how
from tuner.report.rows import ConfigRow, Trust, loss_run, records_sharing, worst
from tuner.report.trust import MARKS, NOTES
from tuner.state.records import BASELINE_ID, FAILED_STATUSES, Summary

# Knob shown in each table column after "Config" (view.TABLE_COLUMNS).
COLUMN_KNOBS = ("batch_size", "num_workers", "precision", "compile", "kernels")


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


@dataclass(kw_only=True)
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


def entry_of(
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


def loss_cell(e: Entry, facts: Facts) -> tuple[str, str]:
    """(the loss, marked when over the limit; the execution that trained it, "" where not recorded)."""
    value = fmt_loss(e.loss) + (" (over limit)" if facts.over_limit(e.loss) else "")
    return value, e.trained.sentence if e.trained and e.loss is not None else ""
