"""The summary as both reports show it: one entry per distinct config, the sentences, the formatting.

report.md and report.html take every number, verdict and reason from here, so the two never disagree.
Reads a typed Summary only, so a report can be rebuilt from a saved summary.json.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tuner.records import BASELINE_ID, FAILED_STATUSES, Summary, Tolerance, TrialRow
from tuner.select import RUN_ONLY_FIELDS, SPEED_ONLY_KNOBS, freeze, knob_diff

TABLE_COLUMNS = (
    "Config",
    "Batch",
    "Workers",
    "Precision",
    "Compile",
    "Kernels",
    "Tok/s",
    "VRAM",
    "Loss",
    "vs baseline",
)
# Knob shown in each table column after "Config".
COLUMN_KNOBS = ("batch_size", "num_workers", "precision", "compile", "kernels")
PHASES = ("baseline", "screen", "loss_check", "remeasure")
# Where a config's speed comes from, best first: loss-check runs share a GPU, so they never count.
SPEED_PHASES = (("remeasure",), ("screen", "baseline"))
DASH = "—"
FAILED_IN = {"loss_check": " in its loss check", "remeasure": " while re-measured"}


# --- formatting ---------------------------------------------------------------------------------------------


def is_num(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def fmt_tps(value: Any) -> str:
    return f"{value:,.0f}" if is_num(value) else DASH


def fmt_mem(mb: Any) -> str:
    if not is_num(mb):
        return DASH
    return f"{mb:,.0f} MiB" if mb < 1024 else f"{mb / 1024:.1f} GiB"


def fmt_loss(value: Any) -> str:
    return f"{value:.4f}" if is_num(value) else DASH


def fmt_jpt(value: Any) -> str:
    """Energy per token, in millijoules (a token costs ~1e-4..1e-2 J)."""
    return f"{value * 1e3:.3g} mJ" if is_num(value) else DASH


def fmt_seconds(seconds: Any) -> str:
    if not is_num(seconds):
        return DASH
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h {minutes:02d}m {secs:02d}s"
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"


def phase_of(trial: TrialRow | Mapping[str, Any]) -> str | None:
    """A trial's phase without its round number; also takes the plain dict rows tuner.search still has."""
    if isinstance(trial, TrialRow):
        return trial.phase_name
    phase = trial.get("phase")
    return TrialRow.model_construct(phase=phase).phase_name if isinstance(phase, str) else phase


def as_summary(summary: Summary | Mapping[str, Any]) -> Summary:
    """A saved summary.json (a dict) validated into the typed record; a Summary passes through."""
    return summary if isinstance(summary, Summary) else Summary.model_validate(summary)


def _tolerance(tol: Tolerance) -> str:
    return f"{tol.mode} tolerance {DASH if tol.value is None else tol.value}"


def _over(loss: float | None, limit: float | None) -> bool:
    return is_num(loss) and is_num(limit) and loss > limit


def changed(config: dict[str, Any], baseline: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """The knobs `config` changes from the baseline, leaving out the run's bookkeeping fields."""
    return {k: v for k, v in knob_diff(config, baseline).items() if k not in RUN_ONLY_FIELDS}


# --- one row per distinct config ----------------------------------------------------------------------------


class ConfigRow:
    """Every run of one config across the phases, reduced to the numbers the reports show."""

    def __init__(self, config: dict[str, Any]):
        self.config = config
        self.trials: list[TrialRow] = []

    @property
    def ids(self) -> list[str]:
        return [t.id for t in self.trials]

    @property
    def label(self) -> str:
        return self.ids[0]

    @property
    def failure(self) -> TrialRow | None:
        """The first run of this config that ran out of memory, went NaN or errored."""
        return next((t for t in self.trials if t.failed), None)

    @property
    def status(self) -> str:
        if self.failure:
            return self.failure.status
        statuses = [t.status for t in self.trials]
        return "ok" if "ok" in statuses or not statuses else statuses[0]

    @property
    def feasible(self) -> bool | None:
        verdicts = [t.feasible for t in self.trials]
        return False if False in verdicts else (True if True in verdicts else None)

    @property
    def checked_by(self) -> str | None:
        return next((t.loss_checked_by for t in self.trials if t.loss_checked_by), None)

    def _measured(self, field: str, phases: tuple[str, ...]) -> list[TrialRow]:
        return [t for t in self.trials if t.phase_name in phases and is_num(getattr(t, field))]

    def runs(self, field: str) -> list[TrialRow]:
        """The runs that give this config's speed or energy `field`: re-measurements, else the screen's."""
        return next((runs for phases in SPEED_PHASES if (runs := self._measured(field, phases))), [])

    def median(self, field: str) -> float | None:
        values = [getattr(t, field) for t in self.runs(field)]
        return statistics.median(values) if values else None

    @property
    def val_loss(self) -> float | None:
        """Its own full-budget run's loss, else any run's (the search copies a loss check's verdict over)."""
        for phases in (("loss_check", "baseline"), PHASES):
            runs = self._measured("val_loss", phases)
            if runs:
                return runs[0].val_loss
        return None

    @property
    def peak_mem_mb(self) -> float | None:
        return max((t.peak_mem_mb for t in self._measured("peak_mem_mb", PHASES)), default=None)


def _identity(config: dict[str, Any], baseline: dict[str, Any]) -> Any:
    full = {**baseline, **config}
    return freeze({k: v for k, v in full.items() if k not in RUN_ONLY_FIELDS})


def _report_order(row: ConfigRow) -> tuple[bool, float]:
    """Fastest first, configs without a speed next, failed configs last (stable: in the order they ran)."""
    tps = row.median("tokens_per_s")
    return row.failure is not None, 0.0 if row.failure else (-tps if tps is not None else math.inf)


def group_rows(summary: Summary) -> tuple[ConfigRow, list[ConfigRow], ConfigRow | None]:
    """(baseline row, the other rows: winner, the rest by speed, failed last in run order; winner row)."""
    base_cfg, best = summary.baseline.config, summary.best
    rows: dict[Any, ConfigRow] = {_identity(base_cfg, base_cfg): ConfigRow(base_cfg)}
    for trial in summary.trials:
        rows.setdefault(_identity(trial.config, base_cfg), ConfigRow(trial.config)).trials.append(trial)
    baseline = rows.pop(_identity(base_cfg, base_cfg))
    winner = None
    if best:
        winner = next((r for r in rows.values() if best.id in r.ids), None)
        winner = winner or rows.get(_identity(best.config, base_cfg))
    ordered = sorted((r for r in rows.values() if r is not winner), key=_report_order)
    return baseline, ([winner] if winner else []) + ordered, winner


# --- sentences ----------------------------------------------------------------------------------------------


def answer(summary: Summary) -> str:
    """The reports' first sentence, with markdown emphasis: the winner against the baseline, or no change."""
    base, best, tol = summary.baseline, summary.best, summary.tolerance
    limit = f"limit {fmt_loss(tol.limit)}: {_tolerance(tol)}"
    base_tps, base_loss = fmt_tps(base.tokens_per_s), fmt_loss(base.val_loss)
    if not best or not changed(best.config, base.config):
        return (
            "No config beat the baseline within tolerance; the baseline "
            f"({base_tps} tok/s, val loss {base_loss}) stays the answer ({limit})."
        )
    lo_hi = best.tokens_per_s_spread
    spread = f" (range {fmt_tps(lo_hi[0])}–{fmt_tps(lo_hi[1])})" if len(lo_hi) == 2 else ""
    versus = f"{best.speedup:.2f}x the baseline's" if is_num(best.speedup) else "against the baseline's"
    return (
        f"**{best.id}** is the fastest config within tolerance: {fmt_tps(best.tokens_per_s)} tok/s{spread}, "
        f"{versus} {base_tps} tok/s. Its validation loss is {fmt_loss(best.val_loss)} against the "
        f"baseline's {base_loss} ({limit})."
    )


def _failure_reason(row: ConfigRow, failure: TrialRow) -> str:
    where = FAILED_IN.get(failure.phase_name, "")
    if failure.status == "oom":
        peak = f" (peak {fmt_mem(row.peak_mem_mb)})" if row.peak_mem_mb else ""
        return f"out of memory{where}{peak}"
    if failure.status == "nan":
        return f"the loss became NaN{where}"
    lines = (failure.error or "").strip().splitlines()
    return f"error{where}: {lines[-1] if lines else 'no message'}"


def rejection(row: ConfigRow, summary: Summary) -> str:
    """Why `row` lost, most decisive cause first."""
    if row.failure:
        return _failure_reason(row, row.failure)
    limit, tps = summary.tolerance.limit, fmt_tps(row.median("tokens_per_s"))
    via = f" (loss run of {row.checked_by})" if row.checked_by and row.checked_by not in row.ids else ""
    if row.feasible is False:
        loss = row.val_loss
        if _over(loss, limit):
            return f"val loss {fmt_loss(loss)} over the limit {fmt_loss(limit)} by {loss - limit:.4f}{via}"
        return f"loss check failed{via}"
    rejected = summary.selection.rejected
    reason = next((rejected[tid] for tid in row.ids if tid in rejected), None)
    if reason:
        return reason
    if row.status == "stopped":
        return f"stopped early: slower than the early-stop threshold ({tps} tok/s)"
    if row.feasible is None:
        return f"slower ({tps} tok/s in the screen): its loss was never checked"
    if any(t.phase_name == "remeasure" for t in row.trials):
        return f"re-measured at {tps} tok/s but not chosen"
    return f"slower ({tps} tok/s in the screen): not among the re-measured finalists"


def measurement_notes(summary: Summary) -> list[str]:
    """How each number was measured, one markdown line each; then the summary's own measurement notes."""
    m, tol = dict(summary.measurement), summary.tolerance
    steps, repeats = m.pop("screen_steps", None), m.pop("repeats", None)
    speed_knobs = ", ".join(sorted(SPEED_ONLY_KNOBS))
    return [
        "Baseline: the seed config trained to the full token budget.",
        f"Speed screen: each config ran {steps or 'a few'} steady-state steps alone on a whole GPU "
        "(exclusive); warm-up and compile steps are not timed; the loss is not judged here.",
        "Loss check: the fastest config per set of loss-relevant knobs trained to the full token budget "
        "on a shared GPU (its speed is not used). Its val loss stands for every config that differs from it "
        f"only in speed knobs ({speed_knobs}).",
        f"Re-measure: the top feasible configs and the baseline, {repeats or 'several'} exclusive runs "
        "each; Tok/s is their median, and configs whose ranges overlap count as tied.",
        "Tok/s in the table: the re-measured median where there is one, else the screen's number.",
        f"Feasible: val loss <= {fmt_loss(tol.limit)} (baseline + {_tolerance(tol)}).",
        *(f"{key}: {value}" for key, value in m.items()),
    ]


# --- how each number was measured ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Facts:
    """How the search measured: the numbers every caption and tooltip quotes."""

    steps: Any
    warmup: Any
    repeats: Any
    fraction: Any
    on_gpu: bool
    limit: float | None
    base_loss: float | None
    base_tps: float | None

    @classmethod
    def of(cls, summary: Summary) -> Facts:
        m, hw = summary.measurement, summary.hardware  # free-form sections: not typed in records
        return cls(
            steps=m.get("screen_steps"),
            warmup=m.get("timing_warmup_steps"),
            repeats=m.get("repeats"),
            fraction=m.get("loss_check_gpu_fraction"),
            on_gpu=bool(hw.get("gpus") or hw.get("cuda")),
            limit=summary.tolerance.limit,
            base_loss=summary.baseline.val_loss,
            base_tps=summary.baseline.tokens_per_s,
        )

    @property
    def timed_steps(self) -> str:
        steps = f"{self.steps} timed steps" if self.steps else "a few timed steps"
        return steps + (f" after {self.warmup} untimed warm-up steps" if self.warmup else "")

    @property
    def shared_loss_runs(self) -> str:
        if not self.on_gpu:
            return "CPU, run beside other loss runs"
        share = f" ({self.fraction:g} of a GPU each)" if is_num(self.fraction) else ""
        return f"GPU shared with other loss runs{share}"

    def over_limit(self, loss: float | None) -> bool:
        return _over(loss, self.limit)

    def speedup(self, tps: float | None) -> float | None:
        ok = is_num(tps) and is_num(self.base_tps) and self.base_tps > 0
        return tps / self.base_tps if ok else None


def _exclusivity(runs: list[TrialRow], facts: Facts) -> str:
    if not facts.on_gpu:
        cpu_shared = sum(1 for r in runs if r.cpu_shared)
        if cpu_shared:
            return (
                f"the whole CPU share, but other processes used the CPU in {cpu_shared} of {len(runs)} runs"
            )
        return "exclusive: the whole CPU share (no GPU)"
    shared = sum(1 for r in runs if r.shared)
    untrusted = sorted({r.telemetry_note for r in runs if r.telemetry_note})
    if shared:
        text = f"GPU shared with another process in {shared} of {len(runs)} runs (telemetry)"
    elif any(r.shared is not None for r in runs):
        text = "exclusive GPU (telemetry saw no other process)"
    else:
        text = "exclusive GPU by scheduling (no telemetry to confirm it)"
    return text + (f"; telemetry untrusted: {'; '.join(untrusted)}" if untrusted else "")


def _how(runs: list[TrialRow], field: str, facts: Facts, show: Callable[[Any], str]) -> str:
    """How a config's `field` was measured: which runs, how many, their spread, whether exclusive."""
    if not runs:
        return "not measured"
    values = [getattr(r, field) for r in runs]
    if runs[0].phase_name == "remeasure":
        spread = f" (range {show(min(values))}–{show(max(values))})" if len(values) > 1 else ""
        text = f"median of {len(runs)} exclusive re-measure runs{spread}, {facts.timed_steps} each"
    elif runs[0].phase_name == "screen":
        text = f"one speed-screen run ({runs[0].id}), {facts.timed_steps}"
    else:
        text = "the baseline's full run at the token budget"
    return f"{text}; {_exclusivity(runs, facts)}"


def _loss_how(row: ConfigRow, role: str, facts: Facts) -> str:
    if role == "baseline":
        return "the baseline's own full run at the token budget"
    own = next((t for t in row.trials if t.phase_name == "loss_check" and is_num(t.val_loss)), None)
    if own:
        return f"loss-check run {own.id}: full token budget, {facts.shared_loss_runs}"
    knobs = ", ".join(sorted(SPEED_ONLY_KNOBS))
    if row.checked_by == BASELINE_ID:
        return f"the baseline's loss: this config differs from it only in speed knobs ({knobs})"
    if row.checked_by:
        return (
            f"from loss-check run {row.checked_by}, whose config differs from this one only in speed knobs "
            f"({knobs})"
        )
    return "not loss-checked: the loss check ran for faster configs only"


def _hows(row: ConfigRow, role: str, facts: Facts) -> dict[str, str]:
    memory = "torch.cuda.max_memory_allocated" if facts.on_gpu else "process peak RSS"
    energy = _how(row.runs("joules_per_token"), "joules_per_token", facts, fmt_jpt)
    return {
        "tps": _how(row.runs("tokens_per_s"), "tokens_per_s", facts, fmt_tps),
        "loss": _loss_how(row, role, facts),
        "mem": f"peak over all runs of this config: {memory}",
        "jpt": f"{energy}; NVML energy over the timed window ÷ tokens processed in it",
    }


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
    loss: float | None
    mem: float | None
    jpt: float | None
    speedup: float | None
    how: dict[str, str]  # "tps", "loss", "mem", "jpt" -> how that number was measured
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

    @property
    def tooltip(self) -> str:
        changes = ", ".join(f"{k}: {old} → {new}" for k, (old, new) in self.changes.items())
        parts = [self.label, changes or "the baseline's config", f"{fmt_tps(self.tps)} tok/s"]
        parts += [f"val loss {fmt_loss(self.loss)}", self.verdict]
        parts.append(f"same config as {', '.join(self.same_as)}" if self.same_as else "")
        return " · ".join(p for p in parts if p)


def _first_num(*values: float | None) -> float | None:
    return next((v for v in values if is_num(v)), None)


def _entry(summary: Summary, facts: Facts, row: ConfigRow, role: str, reason: str) -> Entry:
    tps, loss, speedup = row.median("tokens_per_s"), row.val_loss, None
    if role == "baseline":
        tps, loss, speedup = _first_num(summary.baseline.tokens_per_s, tps), facts.base_loss, 1.0
    elif role == "winner" and summary.best:
        best = summary.best
        tps, loss, speedup = _first_num(best.tokens_per_s, tps), _first_num(best.val_loss, loss), best.speedup
    base_cfg = summary.baseline.config
    return Entry(
        label=BASELINE_ID if role == "baseline" else row.label,
        role=role,
        config={k: row.config.get(k, base_cfg.get(k)) for k in COLUMN_KNOBS},
        changes=changed(row.config, base_cfg),
        status=row.status,
        feasible=True if role == "baseline" else row.feasible,
        tps=tps,
        loss=_first_num(loss),
        mem=row.peak_mem_mb,
        jpt=row.median("joules_per_token"),
        speedup=_first_num(speedup, facts.speedup(tps)),
        how=_hows(row, role, facts),
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
    def changes(self) -> dict[str, tuple[Any, Any]]:
        """What the recommended config changes from the baseline (empty when the baseline stays)."""
        best = self.summary.best
        return changed(best.config, self.summary.baseline.config) if best else {}
