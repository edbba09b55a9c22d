"""How each number was measured: the facts every caption and tooltip quotes, the execution each loss figure
was trained with, and the "How each number was measured" section of both reports.

The wording follows what the summary records, never more: speed runs share a GPU while they compile and
warm up and take turns at a timing gate for their timed windows (`gate_wait_s`, `compiling_beside`); the
re-measure's windows also wait until no run on their GPU is compiling. Summaries from before the gate and
the loss runs' borrowed executions (`execution`, `twin_of`) keep their own wording (`measurement`).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tuner.report import mfu
from tuner.report.fmt import (
    fmt_jpt,
    fmt_loss,
    fmt_tps,
    fmt_warmup,
    is_num,
    knobs_text,
    limit_text,
    over_limit,
)
from tuner.report.horizon_section import budget_text
from tuner.report.rests_on import BASELINE_ALONE, baseline_alone, rests_on
from tuner.report.rows import ConfigRow
from tuner.space.knobs import SPEED_ONLY_KNOBS, knob_diff
from tuner.state.records import BASELINE_ID, LossLimit, Summary, TrialRow

SPEED_KNOBS = ", ".join(sorted(SPEED_ONLY_KNOBS))


@dataclass(frozen=True, kw_only=True)
class Facts:
    """How the search measured: the numbers every caption and tooltip quotes."""

    steps: Any
    warmup: Any
    repeats: Any
    baseline_repeats: Any
    fraction: Any
    on_gpu: bool
    loss_limit: LossLimit | None
    base_loss: float | None
    base_tps: float | None
    twins: bool  # loss runs record the execution they trained with (borrowed from a screened twin)
    hardware_known: bool  # the summary records the trials' hardware
    gpu_runs: bool | None  # some run was placed on a GPU (None: no runs recorded)

    @classmethod
    def of(cls, summary: Summary) -> Facts:
        m, hw = summary.measurement, summary.hardware  # free-form sections: not typed in records
        trials = summary.trials
        return cls(
            steps=m.get("screen_steps"),
            warmup=m.get("timing_warmup_steps"),
            repeats=m.get("repeats"),
            baseline_repeats=m.get("baseline_repeats", m.get("repeats")),
            fraction=m.get("loss_check_gpu_fraction"),
            on_gpu=bool(hw.get("gpus") or hw.get("cuda")),
            loss_limit=summary.loss_limit,
            base_loss=summary.baseline.val_loss,
            base_tps=summary.baseline.tokens_per_s,
            twins=summary.baseline.loss_execution is not None
            or any(t.execution is not None for t in summary.trials),
            hardware_known=bool(hw),
            gpu_runs=any(t.gpu is not None for t in trials) if trials else None,
        )

    @property
    def gpu_columns(self) -> bool:
        """Whether VRAM and J/token mean anything: unless the search is known to have run on CPUs only (its
        hardware has no GPU or, where the hardware is not recorded, no run had one)."""
        return self.on_gpu if self.hardware_known else self.gpu_runs is not False

    @property
    def timed_steps(self) -> str:
        steps = f"{self.steps} timed steps" if self.steps else "a few timed steps"
        return steps + (f" after {self.warmup} untimed warm-up steps" if self.warmup else "")

    @property
    def timed_windows(self) -> str:
        """What is true of every speed figure's timed window, in either measurement scheme."""
        return "timed windows one per GPU at a time" if self.on_gpu else "one run at a time on the CPU"

    @property
    def shared_loss_runs(self) -> str:
        if not self.on_gpu:
            return "CPU, run beside other loss runs"
        share = f" ({self.fraction:g} of a GPU each)" if is_num(self.fraction) else ""
        return f"GPU shared with other loss runs{share}"

    @property
    def limit(self) -> float | None:
        return self.loss_limit.limit if self.loss_limit else None

    @property
    def budget(self) -> str:
        """How far the loss runs trained: the full token budget, or the loss horizon's prefix."""
        return budget_text(self.loss_limit.horizon if self.loss_limit else None)

    def over_limit(self, loss: float | None) -> bool:
        return over_limit(loss, self.loss_limit)


# --- which execution trained a loss figure ------------------------------------------------------------------


@dataclass(frozen=True)
class Trained:
    """The execution (speed-only knobs) a loss figure was trained with, as its loss run recorded it."""

    knobs: dict[str, Any]  # the speed-only knobs it trained with that differ from the baseline config
    twin: str | None  # the screen trial whose execution it borrowed
    baseline: bool  # the baseline's own loss

    @classmethod
    def of(
        cls,
        run: TrialRow | None,
        base_config: dict[str, Any],
        execution: dict[str, Any] | None = None,
        baseline: bool = False,
    ) -> Trained | None:
        """None where nothing is recorded (a summary from before loss runs borrowed an execution)."""
        execution = execution if execution is not None else (run.execution if run else None)
        if execution is None:
            return None
        knobs = {k: new for k, (_, new) in knob_diff(execution, base_config).items()}
        return cls(knobs, run.twin_of if run else None, baseline)

    @property
    def sentence(self) -> str:
        """trained with compile=reduce-overhead (as screen-0 runs)"""
        if not self.knobs:
            return (
                "trained as configured" if self.baseline else "trained with the baseline config's execution"
            )
        return f"trained with {knobs_text(self.knobs)}" + (f" (as {self.twin} runs)" if self.twin else "")


# --- how one config's numbers were measured -----------------------------------------------------------------


def _compiles_beside(runs: list[TrialRow]) -> str:
    """What the gate saw of other runs compiling on the GPU during these runs' timed windows."""
    beside = [r.compiling_beside for r in runs if r.compiling_beside is not None]
    busy = [n for n in beside if n]
    if not beside:
        return ""
    if not busy:
        return f"no other run compiled on its GPU during {'its' if len(beside) == 1 else 'any'} timed window"
    windows = "its timed window" if len(beside) == 1 else f"{len(busy)} of {len(beside)} timed windows"
    return f"other runs compiled on the GPU during {windows} (up to {max(busy)} at once)"


def _gate(runs: list[TrialRow]) -> str:
    """What the timing gate recorded of these runs' timed windows ("" before there was a gate)."""
    gated = [r for r in runs if r.gate_wait_s is not None]
    if not gated:
        return ""
    waited = sum(r.gate_wait_s or 0.0 for r in gated)
    text = "no other run timed on its GPU at the same time (timing gate"
    text += (
        f"; waited {fmt_warmup(waited)}{' in all' if len(gated) > 1 else ''} for its turn)" if waited else ")"
    )
    beside = _compiles_beside(gated)
    return f"{text}; {beside}" if beside else text


def _telemetry(runs: list[TrialRow]) -> str:
    shared = sum(1 for r in runs if r.shared)
    untrusted = sorted({r.telemetry_note for r in runs if r.telemetry_note})
    if shared:
        text = f"a process outside the search used the GPU in {shared} of {len(runs)} runs (telemetry)"
    elif any(r.shared is not None for r in runs):
        text = "telemetry saw no process outside the search on the GPU"
    else:
        text = "no telemetry to check the GPU for other processes"
    return text + (f"; telemetry untrusted: {'; '.join(untrusted)}" if untrusted else "")


def _sharing(runs: list[TrialRow], facts: Facts) -> str:
    """Who else used the hardware while these runs were timed, as far as the summary records it."""
    if not facts.on_gpu:
        cpu_shared = sum(1 for r in runs if r.cpu_shared)
        if cpu_shared:
            return (
                f"the whole CPU share, but other processes used the CPU in {cpu_shared} of {len(runs)} runs"
            )
        return "one run at a time with the whole CPU share (no GPU)"
    return "; ".join(part for part in (_gate(runs), _telemetry(runs)) if part)


def _how(runs: list[TrialRow], field: str, facts: Facts, show: Callable[[Any], str]) -> str:
    """How a config's `field` was measured: which runs, how many, their spread, who shared the hardware."""
    if not runs:
        return "not measured"
    values = [getattr(r, field) for r in runs]
    if runs[0].phase_name == "remeasure":
        spread = f" (range {show(min(values))}–{show(max(values))})" if len(values) > 1 else ""
        text = (
            f"median of {len(runs)} re-measure runs{spread}, {facts.timed_steps} each"
            if len(runs) > 1
            else f"one re-measure run, {facts.timed_steps}"
        )
    elif runs[0].phase_name == "screen":
        text = f"one speed-screen run ({runs[0].id}), {facts.timed_steps}"
    else:
        text = "the baseline's full run at the token budget"
    return f"{text}; {_sharing(runs, facts)}"


LEFT_OUT_WHY = {
    "contended": "other processes shared the window",
    "unjudged": "nothing recorded who else used the machine",
}


def _left_out(row: ConfigRow) -> str:
    parts = [
        f"; {n} {kind} run{'s' if n != 1 else ''} left out ({LEFT_OUT_WHY[kind]})"
        for kind, n in row.left_out("tokens_per_s").items()
        if n
    ]
    return "".join(parts)


def _warmup_how(runs: list[TrialRow]) -> str:
    if not runs:
        return "compile + warm-up not measured"
    what = "compile + warm-up seconds (the untimed first steps)"
    if runs[0].phase_name == "remeasure":
        return f"{what}: median of {len(runs)} re-measure runs, the search's compile caches warm"
    if runs[0].phase_name == "screen":
        return f"{what} of its speed-screen run ({runs[0].id}), the search's first compile of this config"
    return f"{what} of the baseline's full run"


def _loss_how(row: ConfigRow, role: str, facts: Facts, trained: Trained | None) -> str:
    how = f"; {trained.sentence}" if trained else ""
    if role == "baseline":
        if trained is None:
            return "the baseline's own full run at the token budget"
        return f"the baseline's loss run: {facts.budget}, {facts.shared_loss_runs}{how}"
    own = row.own_loss_run
    if own:
        return f"loss-check run {own.id}: {facts.budget}, {facts.shared_loss_runs}{how}"
    if row.checked_by:
        whose = (
            "the baseline's loss"
            if row.checked_by == BASELINE_ID
            else f"from loss-check run {row.checked_by}"
        )
        return f"{whose}: this config differs from that run only in speed knobs ({SPEED_KNOBS}){how}"
    return "not loss-checked: the loss check ran for faster configs only"


def hows(row: ConfigRow, role: str, facts: Facts, trained: Trained | None) -> dict[str, str]:
    """ "tps", "warmup", "loss", "mem", "jpt" -> how that number of `row` was measured."""
    memory = "torch.cuda.max_memory_allocated" if facts.on_gpu else "process peak RSS"
    energy = _how(row.runs("joules_per_token"), "joules_per_token", facts, fmt_jpt)
    return {
        "tps": _how(row.runs("tokens_per_s"), "tokens_per_s", facts, fmt_tps) + _left_out(row),
        "warmup": _warmup_how(row.runs("warmup_s")),
        "loss": _loss_how(row, role, facts, trained),
        "mem": f"peak over all runs of this config: {memory}",
        "jpt": f"{energy}; NVML energy over the timed window ÷ tokens processed in it",
    }


# --- the "How each number was measured" section -------------------------------------------------------------


def _phase_runs(summary: Summary, phase: str) -> list[TrialRow]:
    return [t for t in summary.trials if t.phase_name == phase and t.gate_wait_s is not None]


def _gate_note(runs: list[TrialRow]) -> str:
    """What the gate recorded over a phase: the waits and the compiles beside timed windows."""
    if not runs:
        return ""
    waits = [r.gate_wait_s for r in runs if r.gate_wait_s is not None]  # _phase_runs: all of them
    median = fmt_warmup(statistics.median(waits))
    parts = [
        f"a run waited {fmt_warmup(max(waits))} at most for its turn at the gate, {median} at the median"
    ]
    parts.append(_compiles_beside(runs))
    return "; ".join(p for p in parts if p)


def _baseline_note(summary: Summary, facts: Facts) -> str:
    base = summary.baseline
    run = next((t for t in summary.trials if t.phase_name == "baseline"), None)
    trained = Trained.of(run, base.config, base.loss_execution, baseline=True)
    if trained is None:
        return "Baseline: the seed config trained to the full token budget."
    full = f" at {fmt_tps(base.tokens_per_s_full_run)} tok/s" if is_num(base.tokens_per_s_full_run) else ""
    return (
        "Baseline: the configured run. Its Tok/s is the median of its re-measure runs (as configured); "
        f"its val loss {fmt_loss(base.val_loss)} comes from its loss run at the {facts.budget}, "
        f"{trained.sentence}{full} on a shared {'GPU' if facts.on_gpu else 'CPU'} (that speed is not used)."
    )


def _screen_note(summary: Summary, facts: Facts, how: str | None) -> str:
    text = f"Speed screen: each config ran {facts.steps or 'a few'} steady-state steps"
    if not how:
        return text + "; warm-up and compile steps are not timed; the loss is not judged here."
    gate = _gate_note(_phase_runs(summary, "screen"))
    return (
        f"{text}, timed after {facts.warmup or 'a few'} untimed warm-up steps (compile included); {how}"
        f"{f'; {gate}' if gate else ''}. The loss is not judged here."
    )


def _loss_note(facts: Facts, how: str | None) -> str:
    stands = f"stands for every config that differs from it only in speed knobs ({SPEED_KNOBS})"
    if not facts.twins:
        return (
            f"Loss check: the fastest config per set of loss-relevant knobs trained to the {facts.budget} "
            f"{'on a shared GPU' if facts.gpu_columns else 'on the CPUs'} (its speed is not used). Its val loss "
            f"{stands}."
        )
    how = how or (
        f"the baseline and the fastest config of each set of loss-relevant knobs, {facts.budget}, each "
        "trained with the fastest execution screened for its loss knobs"
    )
    return (
        f"Loss check: {how}. That execution is its twin's: the fastest screened config with the same loss "
        "knobs (batch, precision, lr rule, ...; only speed knobs differ); the Loss column names it where it "
        f"differs from the baseline config. A loss {stands}; these runs' speeds are not used."
    )


def _remeasure_note(summary: Summary, facts: Facts, how: str | None) -> str:
    runs = _phase_runs(summary, "remeasure")
    text = f"Re-measure: the top feasible configs and the baseline, {facts.repeats or 'several'} runs asked of each"
    if baseline_alone(summary):
        text = f"Re-measure: {BASELINE_ALONE}, {facts.baseline_repeats or 'several'} runs asked"
    elif facts.baseline_repeats and facts.baseline_repeats != facts.repeats:
        text = (
            f"Re-measure: the top feasible configs, {facts.repeats or 'several'} runs asked of each, and the "
            f"baseline, {facts.baseline_repeats} (every speed-up divides by it)"
        )
    text += f" ({how})" if how else f" ({facts.timed_windows})"
    text += rests_on(summary, facts.repeats, facts.baseline_repeats)
    if runs and facts.on_gpu:
        text += "; each timed window also waited until no other run on its GPU was compiling"
        gate = _gate_note(runs)
        text += f" ({gate})" if gate else ""
    return text + "; Tok/s is their median, and configs whose ranges overlap count as tied."


def _warmup_note(summary: Summary) -> list[str]:
    if not any(is_num(t.warmup_s) for t in summary.trials):
        return []
    overlap = (
        "; screen compiles may overlap, so it may be slower than alone"
        if _phase_runs(summary, "screen")
        else ""
    )
    return [
        "Warm-up: compile + warm-up seconds (the untimed first steps: compile, autotuning, CUDA-graph "
        "capture), the median of its re-measure runs (the search's compile caches warm) where it has them, "
        f"else its speed-screen run (the search's first compile of it{overlap})."
    ]


def measurement_notes(summary: Summary) -> list[str]:
    """How each number was measured, one markdown line each; then the summary's other measurement notes."""
    m, facts = dict(summary.measurement), Facts.of(summary)
    for key in ("screen_steps", "repeats", "baseline_repeats"):
        m.pop(key, None)
    screen, loss, remeasure = (m.pop(key, None) for key in ("screen", "loss_check", "remeasure"))
    return [
        _baseline_note(summary, facts),
        _screen_note(summary, facts, screen),
        _loss_note(facts, loss),
        _remeasure_note(summary, facts, remeasure),
        "Tok/s in the table: the re-measured median where there is one, else the screen's number.",
        *filter(None, [mfu.note(summary, facts.gpu_columns)]),
        "vs baseline: over the baseline's figure of the same kind, a re-measured median over its re-measured "
        "median, a screen run over the baseline config's own screen run (— where it has none: figures taken "
        "under different conditions are not divided).",
        *_warmup_note(summary),
        f"Feasible: val loss <= the {limit_text(facts.loss_limit)}.",
        *(f"{key}: {value}" for key, value in m.items()),
    ]
