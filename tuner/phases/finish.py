"""The answer: finalists from the re-measured runs, the winner by the selection rule, and OUT's summary.json,
report.md, report.html and best.yaml."""

from __future__ import annotations

import importlib.metadata as md
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainables.common.exit_codes import Exit
from trainables.common.progress import log, metrics_text, per_second
from trainables.config import TrainConfig, dump_config, make_config
from trainables.workloads.workload import WorkloadInfo
from tuner.config import ResourcesSection, SearchSection
from tuner.decide import costs
from tuner.decide.finalists import finalists_of, left_out, settled_notices
from tuner.decide.ratio import one_run_ratio_range, too_few_runs
from tuner.decide.screen_outcome import ScreenOutcome, nothing_screened
from tuner.decide.select import finish_first, headline_untrusted, pick_winner, refuse_untrusted, spread
from tuner.measure.screen_budget import wall_budget_s
from tuner.report import write_reports
from tuner.report.fmt import one_run_text
from tuner.report.horizon_section import budget_text
from tuner.runs.observe import Telemetry
from tuner.runs.placement import PlacementPolicy
from tuner.runs.shapes import RunShapes
from tuner.space.recipe import as_run_here
from tuner.space.recipe import result as recipe_result
from tuner.state.gpu_records import GpuUsage, TelemetrySummary
from tuner.state.hardware import Hardware
from tuner.state.loss_outcome import LossCheckOutcome
from tuner.state.records import BASELINE_ID, BaselineResult, Best, Finalist, LossLimit, Summary, TrialRow
from tuner.state.search_state import State
from tuner.telemetry import fetch_usage
from tuner.telemetry.gpus import gpu_population, gpu_usage, phase_spans

# Said when the baseline stays the answer of a search on CPUs: the usual outcome there, not a failure.
CPU_BASELINE_NOTE = (
    "on a CPU the baseline staying is the usual outcome: bf16 costs loss at a budget as small as a CPU "
    "search trains, the loader knobs buy nothing without a GPU to feed, and CUDA graphs and fused kernels "
    "need a GPU; the search pays off on one"
)
# The same for a workload without fused kernels (kernels left out): nothing it does not have is named.
CPU_BASELINE_NOTE_NO_KERNELS = CPU_BASELINE_NOTE.replace(
    "CUDA graphs and fused kernels need", "CUDA graphs need"
)
# Said after exit 3's line where the baseline's figure came from contended windows only (summary.untrusted).
BASELINE_UNTRUSTED = (
    "the baseline's speed figure is not trusted: other processes contended for the machine in its timed "
    "windows (report.md marks it); run the search again, with a new --out, when the machine is quiet"
)
VERSIONED = ("torch", "ray", "optuna", "hybrid-tuner", "fla-core", "mamba-ssm", "causal-conv1d")
KERNEL_DISTS = ("fla-core", "mamba-ssm", "causal-conv1d")  # only where the workload has fused kernels


@dataclass(frozen=True, kw_only=True)
class FinishInputs:
    """What the answer reads of the search, built in tuner/pipeline.py once the re-measure is done."""

    search: SearchSection
    resources: ResourcesSection
    base: TrainConfig
    hw: Hardware
    shapes: RunShapes
    placement: PlacementPolicy  # after the probe: the screen's places, for summary.json's measurement
    out: Path
    state: State  # the phases' timings, and whether this search confirms a remembered answer
    telemetry: Telemetry
    notices: list[str]
    command: str
    compile_cache: str | None
    workload: WorkloadInfo | None
    knobs_left_out: list[str]

    @property
    def on_gpu(self) -> bool:
        return self.hw.gpus > 0


def summarize(
    inputs: FinishInputs,
    baseline: TrialRow,
    screen: list[TrialRow],
    checked: list[TrialRow],
    remeasure: list[TrialRow],
    loss_limit: LossLimit,
    loss_check: LossCheckOutcome | None = None,
) -> Summary:
    base, tokens = inputs.base.model_dump(), inputs.base.tokens
    finalists = _finalists(inputs, baseline, screen, checked, remeasure)
    base_runs = next((f.runs for f in finalists if f.id == BASELINE_ID), [])
    # The baseline competes too: when nothing beats it beyond noise, the simplest (it) wins; and a planned
    # run too short to pay for a winner's compile goes to the config that finishes it first.
    selection = finish_first(pick_winner(finalists, base), finalists, tokens)
    untrusted = refuse_untrusted(selection, finalists) or headline_untrusted(selection.winner, finalists)
    winner = selection.winner
    if not any(f.feasible for f in finalists if f.id != BASELINE_ID):
        winner = None  # nothing but the baseline itself passed: exit 3, the baseline is the answer
    trials, timings = [baseline, *screen, *checked, *remeasure], _timings(inputs)
    return Summary(
        baseline=_baseline_result(base, base_runs, baseline),
        unit=inputs.workload.unit if inputs.workload else "tokens",
        best=_best(winner, base_runs, _val_metrics(winner.id, baseline, screen, checked)) if winner else None,
        untrusted=untrusted,
        nothing_screened=nothing_screened(
            ScreenOutcome.of(screen), wall_budget_s(inputs.search, inputs.hw.gpus)
        ),
        remembered=inputs.state.data.get("remembered"),
        trials=_without_timelines(trials),
        loss_limit=loss_limit,
        loss_check=loss_check,
        hardware=inputs.hw.model_dump(),
        versions=_versions(leave_out=KERNEL_DISTS if "kernels" in inputs.knobs_left_out else ()),
        timings=timings,
        selection=selection.to_record(),
        notices=[*inputs.notices, *_said(settled_notices(finalists))],
        telemetry=TelemetrySummary(
            available=inputs.telemetry.available,
            notice=inputs.telemetry.notice,
            timelines=_timelines(remeasure, winner.id if winner else None),
        ),
        command=inputs.command,
        best_yaml=str(inputs.out / "best.yaml"),
        measurement=_measurement(inputs),
        early_stop_ratio=inputs.search.early_stop_ratio,  # what the report's early stops quote
        planned_tokens=tokens,
        compile_cache=inputs.compile_cache,
        finalists=finalists,
        break_even=costs.break_even(screen, finalists, base),
        gpu_usage=_gpu_usage(inputs, timings, trials),
        gpu_population=gpu_population(remeasure),
        knobs_left_out=inputs.knobs_left_out,
        recipe=recipe_result(
            as_run_here(inputs.search, inputs.base, inputs.hw.model_dump()),
            inputs.base,
            screen,
            str(inputs.out / "recipe.yaml"),
        ),
    )


def _finalists(
    inputs: FinishInputs,
    baseline: TrialRow,
    screen: list[TrialRow],
    checked: list[TrialRow],
    remeasure: list[TrialRow],
) -> list[Finalist]:
    """The finalists' records, with the runs asked of each that never ran: the one record the notice of the
    baseline's left-out runs and the report's measured section both count from."""
    base, tokens = inputs.base.model_dump(), inputs.base.tokens
    asked = inputs.search.remeasure_runs(confirming=bool(inputs.state.data.get("remembered")))
    return left_out(
        finalists_of(base, baseline, screen, remeasure, tokens, checked), remeasure, tokens, asked
    )


def _baseline_result(base: dict[str, Any], runs: list[float], loss_run: TrialRow) -> BaselineResult:
    """The baseline's speed (the median of its re-measured runs) and its loss run's figures."""
    return BaselineResult(
        config=base,
        tokens_per_s=spread(runs)[0] if runs else None,
        tokens_per_s_full_run=loss_run.tokens_per_s,
        val_loss=loss_run.val_loss,
        val_metrics=loss_run.val_metrics,
        loss_execution=loss_run.execution,
    )


def write(inputs: FinishInputs, summary: Summary) -> int:
    """OUT's files and the exit code (trainables/common/exit_codes.py); the last lines say how the search ended,
    on CPUs why the baseline usually stays, and the command that trains the answer."""
    best = summary.best
    settings = {
        "compile_cache": inputs.compile_cache,
        # on a GPU the trials' threads: more only spin between steps; on a CPU they are the compute, and
        # the trials had few only to share the machine
        **(measured_threads(summary.trials, best.id if best else BASELINE_ID) if inputs.on_gpu else {}),
        "data_sha256": None,  # for training on whatever corpus its user has; the corpus check is the search's
    }
    base = inputs.base.model_dump()
    config = make_config({**base, **(best.config if best else {}), **settings})
    dump_config(config, inputs.out / "best.yaml", inputs.knobs_left_out)
    if summary.recipe is not None:  # best.yaml's run settings: the two compare like for like
        recipe = make_config({**base, **summary.recipe.knobs, **settings})
        dump_config(recipe, inputs.out / "recipe.yaml", inputs.knobs_left_out)
    (inputs.out / "summary.json").write_text(summary.model_dump_json(indent=1))
    written = write_reports(inputs.out, summary)
    log("reports: " + ", ".join(str(p) for p in written))
    code = _say_outcome(summary)
    if code == Exit.BASELINE_STAYS and not inputs.on_gpu:
        log(CPU_BASELINE_NOTE_NO_KERNELS if "kernels" in inputs.knobs_left_out else CPU_BASELINE_NOTE)
    # absolute: best.yaml names the workload by absolute path too, so the command runs from any folder
    log(f"run it: python -m trainables.train --config {(inputs.out / 'best.yaml').resolve()}")
    return code


def _say_outcome(summary: Summary) -> Exit:
    """One line for how the search ended; its exit code."""
    best = summary.best
    if summary.nothing_screened:
        log(f"{summary.nothing_screened}; the baseline stays the answer (best.yaml is the baseline)")
        return Exit.NOTHING_SCREENED
    if summary.refused:
        log(
            "the speed figures are not trusted: other processes contended for the machine during the "
            "re-measure, also when its windows were repeated; no winner is crowned on them, the baseline "
            "stays the answer (best.yaml is the baseline); run the search again, with a new --out, when the "
            "machine is quiet"
        )
        return Exit.UNTRUSTED
    if not best:
        shaky = f"; {BASELINE_UNTRUSTED}" if summary.untrusted else ""
        log(
            f"no config passed the loss check: the baseline stays the answer (best.yaml is the baseline){shaky}"
        )
        return Exit.BASELINE_STAYS
    if best.id == BASELINE_ID:
        tie = [i for i in summary.selection.tied if i != BASELINE_ID]
        with_tie = f", a tie with {', '.join(tie)}" if tie else ""
        log(
            f"the baseline stays the answer ({best.tokens_per_s:,.0f} {per_second(summary.unit)}){with_tie}: no config "
            "that passed the loss check was faster beyond the noise of the re-measured runs (best.yaml is "
            "the baseline)"
        )
        return Exit.BASELINE_STAYS  # the answer and code of a search where nothing passed (issue 56 item 2)
    one_run = f"; {text}" if (text := one_run_text(best)) else ""
    # a warm-up timed while other runs warmed up beside it is an upper bound of what the run alone pays
    beside = next((f.warmup_beside for f in summary.finalists if f.id == best.id), None)
    takes = "at most " if beside else "~"
    log(
        f"best: {best.id} {best.config} -> {best.tokens_per_s:,.0f} {per_second(summary.unit)} "
        f"({best.speedup}x baseline{one_run}), val loss {best.val_loss}{metrics_text(best.val_metrics)}; the "
        f"planned run ({summary.planned_tokens:,} {summary.unit}) takes {takes}{best.time_to_train_s:,.0f} s, compile included"
    )
    return Exit.OK


def _val_metrics(
    fid: str, baseline: TrialRow, screen: list[TrialRow], checked: list[TrialRow]
) -> dict[str, float] | None:
    """The workload's own val figures (accuracy, ...) of the loss run whose verdict finalist `fid` carries."""
    by = next((t.loss_checked_by for t in screen if t.id == fid), BASELINE_ID)
    run = baseline if by == BASELINE_ID else next((c for c in checked if c.id == by), None)
    return run.val_metrics if run else None


def _best(winner: Finalist, base_runs: list[float], val_metrics: dict[str, float] | None = None) -> Best:
    median, lo, hi = spread(winner.runs)
    base_median = spread(base_runs)[0] if base_runs else None
    speedup = round(median / base_median, 3) if base_median else None
    one_run = one_run_ratio_range(winner.runs, base_runs, speedup) if speedup else None
    return Best(
        id=winner.id,
        config=winner.config,
        tokens_per_s=median,
        tokens_per_s_spread=[lo, hi],
        val_loss=winner.val_loss,
        val_metrics=val_metrics,
        speedup=speedup,
        speedup_one_run=[round(v, 3) for v in one_run] if one_run else [],
        speedup_one_run_note=too_few_runs(winner.runs, base_runs) if speedup else None,
        warmup_s=winner.warmup_s,
        time_to_train_s=winner.time_to_train_s,
    )


def _timelines(remeasure: list[TrialRow], best_id: str | None) -> dict[str, list[dict]]:
    """The GPU timeline of one exclusive run of the baseline and of the winner (for the report's plots)."""
    out = {}
    for fid in (BASELINE_ID, best_id):
        found = next(((r.id, r.timeline) for r in remeasure if r.finalist == fid and r.timeline), None)
        if found:
            trial_id, timeline = found
            out[trial_id] = timeline.get("points", [])
    return out


THREADS = ("cpu_threads", "compile_threads")


def measured_threads(rows: list[TrialRow], config_id: str) -> dict[str, int]:
    """The CPU and compile threads the config's runs had (Ray gives a trial as many CPU threads as CPUs),
    for best.yaml: its run then spins no more threads between steps than the runs that timed it."""
    # the re-measure's runs, whose figures crowned it; a config never re-measured: any run of it
    runs = [r for r in rows if r.finalist == config_id] or [r for r in rows if r.id == config_id]
    found = {name: [getattr(r, name) for r in runs if getattr(r, name) is not None] for name in THREADS}
    return {name: values[0] for name, values in found.items() if values}


def _without_timelines(rows: list[TrialRow]) -> list[TrialRow]:
    """summary.json's rows: no timelines, and no trial folder that is not there (a remembered search's
    rows name the earlier OUT's folders, which may be gone; a deleted ray/ folder): `path` None then."""
    return [r.model_copy(update={"timeline": None, "path": existing_folder(r.path)}) for r in rows]


def existing_folder(path: str | None) -> str | None:
    return path if path and Path(path).is_dir() else None


def _timings(inputs: FinishInputs) -> dict[str, float]:
    timings = inputs.state.timings
    # loss_check_N rounds are inside loss_check
    return {**timings, "total": round(sum(v for k, v in timings.items() if not k[-1].isdigit()), 1)}


def _gpu_usage(inputs: FinishInputs, timings: dict[str, float], trials: list[TrialRow]) -> list[GpuUsage]:
    """How busy each GPU was in each phase, from the samplers' history (none on CPUs or without telemetry)."""
    spans = phase_spans(timings, trials)
    if not (inputs.on_gpu and inputs.telemetry.actors and spans):
        return []
    return gpu_usage(fetch_usage(inputs.telemetry.actors, spans), trials)


def _measurement(inputs: FinishInputs) -> dict:
    timed = (
        f"up to {inputs.placement.speed().concurrent} runs share the GPUs while they compile and warm up; "
        "their timed windows take turns, one per GPU at a time"
        if inputs.on_gpu
        else "one run at a time with the whole CPU share"
    )
    base_runs, runs = inputs.search.remeasure_runs(confirming=bool(inputs.state.data.get("remembered")))
    return {
        "screen_steps": inputs.search.screen_steps,
        "timing_warmup_steps": inputs.base.timing_warmup_steps,
        "repeats": runs,
        "baseline_repeats": base_runs,
        "screen": timed,
        "loss_check": ("shared GPU (fractions)" if inputs.on_gpu else "CPU runs side by side")
        + f", {budget_text(inputs.shapes.horizon)}, val loss only; each trained with the fastest "
        "execution screened for its loss knobs (the baseline too)",
        "remeasure": "all its runs at once where the CPUs and memory allow, spread evenly over the GPUs "
        "(their cached warm-ups overlap); timed windows take turns, one per GPU at a time, each also waiting "
        "until no run on its GPU is compiling; repeated; medians"
        if inputs.on_gpu
        else f"{timed}; repeated; medians",
        "loss_check_gpu_fraction": inputs.resources.loss_check_gpu_fraction,
    }


def _versions(leave_out: tuple[str, ...] = ()) -> dict[str, str]:
    out = {"python": sys.version.split()[0]}
    for dist in (d for d in VERSIONED if d not in leave_out):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            pass
    return out


def _said(notices: list[str]) -> list[str]:
    """The notices, each logged as the phases log theirs (context.Notices)."""
    for line in notices:
        log(f"notice: {line}")
    return notices
