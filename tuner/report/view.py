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

from tuner.records import BASELINE_ID, FAILED_STATUSES, Summary, TrialRow
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
    one_run_text,
    over_limit,
    short_ids,
    tolerance_text,
)
from tuner.report.gpu_section import Gpus, gpus
from tuner.report.measured import Facts, Trained, hows
from tuner.report.rows import ConfigRow, group_rows, loss_run

TABLE_COLUMNS = (
    "Config",
    "Batch",
    "Workers",
    "Precision",
    "Compile",
    "Kernels",
    "Tok/s",
    "Warm-up",
    "VRAM",
    "Loss",
    "vs baseline",
)
# Knob shown in each table column after "Config".
COLUMN_KNOBS = ("batch_size", "num_workers", "precision", "compile", "kernels")
GPU_COLUMNS = ("VRAM", "J/token")  # left out of a search on CPUs: no GPU memory, no GPU energy
FAILED_IN = {"loss_check": " in its loss check", "remeasure": " while re-measured"}


CONTENDED = " (contended)"  # after a speed taken while other processes used the CPUs or the GPU
CONTENDED_NOTE = (
    "(contended): every timed window behind that figure (for a ratio: its own or the baseline's) was shared "
    "with other processes (CPUs or GPU), so it says more about the load than about the config; it is not "
    "trusted."
)
UNTRUSTED_ANSWER = (
    "**Not trusted: the speed figures were taken while other processes kept the machine busy.** The "
    "re-measure timed its contended windows again and the load stayed, so no winner is crowned on them "
    "(exit 4); run the search again on a quiet machine."
)


def tps_text(e: Entry) -> str:
    """The entry's tok/s as the tables show it, marked when contended."""
    return fmt_tps(e.tps) + (CONTENDED if e.tps_contended and e.tps is not None else "")


def speedup_text(e: Entry, base: Entry, times: str = "x") -> str:
    """The entry's speed-up, marked when its figure or the baseline's (the denominator) is contended."""
    if e.speedup is None:
        return DASH
    return f"{e.speedup:.2f}{times}" + (CONTENDED if e.tps_contended or base.tps_contended else "")


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
    gate, tps = summary.loss_gate, fmt_tps(row.median("tokens_per_s"))
    via = f" (loss run of {row.checked_by})" if row.checked_by and row.checked_by not in row.ids else ""
    if row.feasible is False:
        loss = row.val_loss
        if over_limit(loss, gate):
            return f"val loss {fmt_loss(loss)} over the limit {fmt_loss(gate.limit)} by {loss - gate.limit:.4f}{via}"
        return f"loss check failed{via}"
    rejected = summary.selection.rejected
    reason = next((rejected[tid] for tid in row.ids if tid in rejected), None)
    if reason:
        return reason
    if row.status == "stopped":
        return f"stopped early: slower than the early-stop threshold ({tps} tok/s)"
    if row.feasible is None:
        best = summary.best.tokens_per_s if summary.best else None
        if best and (row.median("tokens_per_s") or 0) > best:  # faster, but never loss-checked
            return f"its loss was never checked (search.loss_check_top reached): {tps} tok/s in the screen"
        return f"slower ({tps} tok/s in the screen): its loss was never checked"
    if any(t.phase_name == "remeasure" for t in row.trials):
        return f"re-measured at {tps} tok/s but not chosen"
    return f"slower ({tps} tok/s in the screen): not among the re-measured finalists"


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
    tps_contended: bool  # its speed comes from contended windows only: marked wherever it is shown
    warmup: float | None  # compile + warm-up seconds: warm (re-measure) where it has them, else its screen's
    loss: float | None
    trained: Trained | None  # the execution its loss figure was trained with (None: not recorded)
    mem: float | None
    jpt: float | None
    speedup: float | None
    how: dict[str, str]  # "tps", "warmup", "loss", "mem", "jpt" -> how that number was measured
    reason: str  # why it lost ("" for the winner and for a baseline that stays)
    same_as: list[str]  # other screen trials that proposed this same config

    @property
    def failed(self) -> bool:
        return self.status in FAILED_STATUSES

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
        parts = [self.label, changes or "the baseline's config", f"{fmt_tps(self.tps)} tok/s"]
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


def _entry(summary: Summary, facts: Facts, row: ConfigRow, role: str, reason: str) -> Entry:
    tps, loss, speedup = row.median("tokens_per_s"), row.val_loss, None
    if role == "baseline":
        tps, loss, speedup = _first_num(summary.baseline.tokens_per_s, tps), facts.base_loss, 1.0
    elif role == "winner" and summary.best:
        best = summary.best
        tps, loss, speedup = _first_num(best.tokens_per_s, tps), _first_num(best.val_loss, loss), best.speedup
    base_cfg, trained = summary.baseline.config, _trained(summary, row, role)
    label = BASELINE_ID if role == "baseline" else row.label
    return Entry(
        label=label,
        role=role,
        config={k: row.config.get(k, base_cfg.get(k)) for k in COLUMN_KNOBS},
        changes=changed(row.config, base_cfg),
        status=row.status,
        feasible=True if role == "baseline" else row.feasible,
        tps=tps,
        tps_contended=row.speed_contended,
        warmup=_warmup(summary, row, label),
        loss=_first_num(loss),
        trained=trained,
        mem=row.peak_mem_mb,
        jpt=row.median("joules_per_token"),
        speedup=_first_num(speedup, facts.speedup(tps)),
        how=hows(row, role, facts, trained),
        reason=reason,
        same_as=[t.id for t in row.trials[1:] if t.phase_name == "screen"],
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
        entries = [
            _entry(summary, facts, baseline, "baseline", rejection(baseline, summary) if winner else "")
        ]
        for row in rows:
            role = "winner" if row is winner else "other"
            entries.append(
                _entry(summary, facts, row, role, "" if row is winner else rejection(row, summary))
            )
        return cls(summary, facts, entries)

    def columns(self, head: tuple[str, ...]) -> tuple[str, ...]:
        """The table's columns: `head` without VRAM and J/token where the search ran on CPUs, and without
        the knobs the workload does not implement (Kernels for a model without fused kernels)."""
        knob_of = dict(zip(TABLE_COLUMNS[1:], COLUMN_KNOBS))
        off = {c for c, k in knob_of.items() if k in self.summary.knobs_left_out}
        off |= set() if self.facts.gpu_columns else set(GPU_COLUMNS)
        return tuple(c for c in head if c not in off)

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
        summary, base, winner = self.summary, self.baseline, self.winner
        best, gate = summary.best, summary.loss_gate
        limit = f"limit {fmt_loss(gate.limit if gate else None)}: {tolerance_text(gate)}"
        base_tps, base_loss = fmt_tps(base.tps), fmt_loss(summary.baseline.val_loss)
        after = planned_run(summary)
        if summary.untrusted:
            return (
                f"{UNTRUSTED_ANSWER} The baseline ({base_tps} tok/s, val loss {base_loss}) stays the answer."
            )
        if not best or not changed(best.config, summary.baseline.config):
            trained = f" Its loss run was {base.trained.sentence}." if base.trained else ""
            return (
                "No config beat the baseline within tolerance; the baseline "
                f"({base_tps} tok/s, val loss {base_loss}) stays the answer ({limit}).{trained} {after}"
            ).rstrip()
        lo_hi = best.tokens_per_s_spread
        spread = f" (range {fmt_tps(lo_hi[0])}–{fmt_tps(lo_hi[1])})" if len(lo_hi) == 2 else ""
        versus = f"{best.speedup:.2f}x the baseline's" if is_num(best.speedup) else "against the baseline's"
        one_run = f" ({text})" if (text := one_run_text(best)) else ""
        return (
            f"**{best.id}** {_is_the(summary)}: {fmt_tps(best.tokens_per_s)} tok/s{spread}, {versus} "
            f"{base_tps} tok/s{one_run}. Its validation loss is {fmt_loss(best.val_loss)} against the baseline's "
            f"{base_loss} ({limit}){_trained_clause(winner, base)}. {after}"
        ).rstrip()


def _is_the(summary: Summary) -> str:
    loser = summary.selection.finishes_later
    if loser is None:
        return "is the fastest config within tolerance"
    tokens = f" ({summary.planned_tokens:,} tokens)" if summary.planned_tokens else ""
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
