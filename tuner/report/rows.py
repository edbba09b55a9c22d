"""One row per distinct config: every run of it across the phases, reduced to the numbers the reports show."""

from __future__ import annotations

import math
import statistics
from typing import Any, Literal

from tuner.report.fmt import is_num
from tuner.space.knobs import RUN_ONLY_FIELDS, freeze
from tuner.state.records import BASELINE_ID, Summary, TrialRow

PHASES = ("baseline", "screen", "loss_check", "remeasure")
# Where a config's speed comes from, best first: loss-check runs share a GPU, so they never count.
SPEED_PHASES = (("remeasure",), ("screen", "baseline"))
LOSS_PHASES = ("loss_check", "baseline")
# A speed figure's trust, worst last: its windows shared with other processes, or not judged (nothing
# recorded who else used the machine: a window too short to judge, or a run stopped before it said).
Trust = Literal["trusted", "unjudged", "contended"]
TRUST_ORDER: tuple[Trust, ...] = ("trusted", "unjudged", "contended")


def worst(*trusts: Trust) -> Trust:
    return max(trusts, key=TRUST_ORDER.index)


def records_sharing(summary: Summary) -> bool:
    """Whether the search judged its runs at all: summaries from before the CPU shares and without GPU
    telemetry judged none, and marking every figure of theirs would say nothing."""
    return any(t.judged for t in summary.trials)


def is_speed_run(trial: TrialRow) -> bool:
    """Not a loss run. The baseline's full run timed its speed until its loss run borrowed its twin's
    execution (recorded as `execution`): since then it is a loss-check run like the others."""
    return trial.phase_name != "baseline" or trial.execution is None


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

    def speed_phases(self, field: str = "tokens_per_s") -> tuple[str, ...] | None:
        """The SPEED_PHASES entry this config's `field` comes from (re-measure, else screen), or None. Two
        figures are of the same kind, and may be divided, only where it is the same."""
        for phases in SPEED_PHASES:
            if any(is_speed_run(t) for t in self._measured(field, phases)):
                return phases
        return None

    def _speed_runs(self, field: str, phases: tuple[str, ...] | None) -> list[TrialRow]:
        return [t for t in self._measured(field, phases) if is_speed_run(t)] if phases else []

    def runs(self, field: str, phases: tuple[str, ...] | None = None) -> list[TrialRow]:
        """The runs that give this config's speed, energy or warm-up `field`: re-measurements, else the
        screen's (never a loss run's), or those of `phases`. Runs judged uncontended first; unjudged ones
        where there are none; contended ones only where all are."""
        runs = self._speed_runs(field, phases or self.speed_phases(field))
        clean = [t for t in runs if not t.contended]
        return [t for t in clean if t.judged] or clean or runs

    def left_out(self, field: str) -> dict[str, int]:
        """How many contended and unjudged runs `runs(field)` left out ("contended", "unjudged" -> n)."""
        kept = {t.id for t in self.runs(field)}
        out = [t for t in self._speed_runs(field, self.speed_phases(field)) if t.id not in kept]
        return {
            "contended": sum(1 for t in out if t.contended),
            "unjudged": sum(1 for t in out if not t.contended),
        }

    def speed_trust(self, judging: bool, phases: tuple[str, ...] | None = None) -> Trust:
        """The trust of its speed figure (of `phases`): contended where every run behind it was; unjudged
        where none recorded who else used the machine and the search judged others (`judging`)."""
        runs = self.runs("tokens_per_s", phases)
        if runs and all(t.contended for t in runs):
            return "contended"
        if judging and runs and not any(t.judged for t in runs):
            return "unjudged"
        return "trusted"

    def median(self, field: str, phases: tuple[str, ...] | None = None) -> float | None:
        values = [getattr(t, field) for t in self.runs(field, phases)]
        return statistics.median(values) if values else None

    @property
    def own_loss_run(self) -> TrialRow | None:
        """Its own full-budget run (the baseline's, or its loss check), when it has one with a loss."""
        return next(iter(self._measured("val_loss", LOSS_PHASES)), None)

    @property
    def val_loss(self) -> float | None:
        """Its own full-budget run's loss, else any run's (the search copies a loss check's verdict over)."""
        for phases in (LOSS_PHASES, PHASES):
            runs = self._measured("val_loss", phases)
            if runs:
                return runs[0].val_loss
        return None

    @property
    def peak_mem_mb(self) -> float | None:
        peaks = (t.peak_mem_mb for t in self._measured("peak_mem_mb", PHASES) if t.peak_mem_mb is not None)
        return max(peaks, default=None)


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


def loss_run(row: ConfigRow, summary: Summary) -> TrialRow | None:
    """The run whose val loss stands for `row`'s: its own, else the loss run named by `loss_checked_by`."""
    own = row.own_loss_run
    if own or not row.checked_by:
        return own
    found = next((t for t in summary.trials if t.id == row.checked_by), None)
    if found is None and row.checked_by == BASELINE_ID:
        found = next((t for t in summary.trials if t.phase_name == "baseline"), None)
    return found
