"""The search's pipeline, read top to bottom: hardware -> batch probe -> speed screen (the baseline's loss run
and the candidates' beside it) -> loss check -> re-measure -> answer. `python -m tuner.search` (tuner/search.py)
reads the command line, starts Ray and claims OUT, then runs this; docs/architecture.md says what each
phase measures and why. Each finished phase is recorded in OUT/state.json, so `--resume` and a remembered
answer skip it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ray

from trainables.common.errors import EnvironmentFault
from trainables.common.exit_codes import Exit
from trainables.common.progress import log
from trainables.config import ConfigError, TrainConfig, make_config
from trainables.training.gate import open_gates, retire_idle_gates
from trainables.workloads.workload import WorkloadInfo
from tuner.config import SearchConfig
from tuner.context import Notices, SearchContext
from tuner.decide.loss_plan import LossCheck
from tuner.decide.select import with_feasibility
from tuner.measure import baseline, eta
from tuner.measure.loss_so_far import LossSoFar
from tuner.phases import finish, loss_check, probe, remeasure, screen
from tuner.runs import observe
from tuner.runs.ahead import pending
from tuner.runs.request import TrialInputs
from tuner.runs.scheduler import RunScheduler
from tuner.runs.tasks import TaskRun, on_a_trial_node
from tuner.space import recipe
from tuner.space.domains import applicable, autotune_notice, probe_hardware
from tuner.state import answers
from tuner.state.hardware import Hardware, ProbedBatch
from tuner.state.records import TrialRow
from tuner.state.search_state import State


def run_search(ctx: SearchContext, fresh: bool = False, kept: Path | None = None) -> int:
    """`kept`: where finished searches are remembered (answers.answers_dir()); `fresh`: ignore them."""
    open_gates()  # one timed window per GPU at a time, made before any run asks for one
    try:
        return _pipeline(ctx, fresh, kept or answers.answers_dir())
    finally:  # detached, the gates would stay on a cluster that outlives the search
        try:
            retire_idle_gates()
        except Exception as err:  # noqa: BLE001 - a cleanup must not hide why the search ended
            log(f"notice: the timing gates stay on the cluster ({type(err).__name__}: {err})")


def _pipeline(ctx: SearchContext, fresh: bool, kept: Path) -> int:
    remembered = recall_answer(ctx, fresh, kept)
    sizing = probe_inputs(ctx)
    ctx = ctx.with_probed(
        ctx.phase("probe", lambda: probe.largest_batches(sizing, ctx.space), dict[str, ProbedBatch])
    )
    space = probe.bounded(sizing, ctx.space, ctx.probed)
    # what each later phase reads of the search, read once (after the probe: its places), and the one
    # scheduler every run from here on goes through
    runs = run_scheduler(ctx)
    checking = loss_check_inputs(ctx, runs)
    again = remeasure_inputs(ctx, runs)
    answer = finish_inputs(ctx)
    s, loss_checked = ctx.cfg.search, checking.loss_checked
    beside, seeds_beside, so_far = _loss_runs_beside(ctx, checking, space)
    ahead, besides = so_far.ahead, [*so_far.besides]
    looking = screen.ScreenInputs(
        search=s,
        resume=ctx.resume,
        base=ctx.base,
        gpus=ctx.hw.gpus,
        shapes=ctx.shapes,
        placement=ctx.placement,
        probed=ctx.probed,
        out=ctx.out,
        scheduler=runs,
        notice=ctx.notice,
        verdicts=so_far,
    )
    screened = ctx.phase("screen", lambda: screen.time_proposals(looking, space), list[TrialRow])
    remaining = eta.Remaining(ctx.shapes, s, ctx.hw.gpus, again.confirming, loss_checked)
    # as the runs beside the screen stand; none for a search resumed after its re-measure (it skips it)
    planned_remeasure_s = (
        None
        if ctx.state.phase("remeasure") is not None
        else eta.after_screen(remaining, screened, pending(besides, ahead))
    )

    done = ctx.phase(
        "loss_check",
        lambda: loss_check.check_losses(checking, screened, beside, ahead, seeds_beside),
        LossCheck,
    )
    if ahead is not None:
        ahead.cancel_rest()
    base_row, checked = done.baseline, done.candidates
    # as it was set: the phase may be resumed
    loss_limit = baseline.loss_limit_of(ctx.cfg.quality, ctx.shapes.horizon, base_row, done.seeds)
    screened = with_feasibility(screened, checked, loss_limit, baseline=ctx.base.model_dump())
    measured = ctx.phase(
        "remeasure", lambda: remeasure.time_finalists(again, screened, planned_remeasure_s), list[TrialRow]
    )

    summary = finish.summarize(answer, base_row, screened, checked, measured, loss_limit, done.outcome)
    code = finish.write(answer, summary)
    if not remembered and code != Exit.NOTHING_SCREENED:
        _remember(ctx, kept, summary.untrusted)
    return code


def _loss_runs_beside(
    ctx: SearchContext, checking: loss_check.LossCheckInputs, space: dict[str, Any]
) -> tuple[TaskRun | None, list[TaskRun], LossSoFar]:
    """The loss runs that train beside the screen, in its GPUs' idle time: the baseline's (at a loss horizon
    its second seed's too) and the candidates' ahead of the loss check as the screen finds them, with what
    they say so far (LossSoFar: the screen's sampler and the runs ahead read it). The runs ahead are told the
    screen's rows as they come (and no other ledger's: they plan from the screen's alone)."""
    room = beside_inputs(ctx, checking)
    beside = baseline.start_beside(room, space)
    seeds_beside = baseline.start_seeds_beside(room, beside)
    besides = [beside, *seeds_beside] if beside is not None else []
    rule = baseline.BaselineLoss(ctx.shapes, ctx.cfg.quality, ctx.notice)
    so_far = LossSoFar(rule, room.scheduler, besides)
    so_far.ahead = loss_check.start_ahead(checking, so_far)  # their plan reads the verdicts too
    if so_far.ahead is not None:
        checking.scheduler.listen(screen.LEDGER, so_far.ahead.consider)
    return beside, seeds_beside, so_far


def beside_inputs(ctx: SearchContext, checking: loss_check.LossCheckInputs) -> baseline.Beside:
    """What the baseline's loss runs beside the screen read of the search (its scheduler and whether the loss
    check is done: the loss check's)."""
    return baseline.Beside(
        shapes=ctx.shapes,
        placement=ctx.placement,
        scheduler=checking.scheduler,
        start_points=ctx.cfg.search.start_points,
        loss_checked=checking.loss_checked,
        notice=ctx.notice,
    )


def probe_inputs(ctx: SearchContext) -> probe.ProbeInputs:
    """What the probe and the space it bounds read of the search."""
    return probe.ProbeInputs(ctx.cfg.search, ctx.base, ctx.on_gpu, ctx.inputs.corpus, ctx.notice)


def run_scheduler(ctx: SearchContext) -> RunScheduler:
    """The search's one run scheduler: every phase's runs after the probe go through it."""
    cpus = ctx.cfg.resources.cpus_per_trial
    return RunScheduler(out=ctx.out, inputs=ctx.inputs, cpus_per_trial=cpus, observed=ctx)


def loss_check_inputs(ctx: SearchContext, runs: RunScheduler) -> loss_check.LossCheckInputs:
    """What the loss check and its runs ahead read of the search (after the probe: its places), `runs`:
    the search's run scheduler."""
    return loss_check.LossCheckInputs(
        search=ctx.cfg.search,
        quality=ctx.cfg.quality,
        base=ctx.base,
        hw=ctx.hw,
        shapes=ctx.shapes,
        placement=ctx.placement,
        loss_checked=ctx.state.phase("loss_check") is not None,  # resumed, or remembered
        scheduler=runs,
        phase=ctx.phase,
        notice=ctx.notice,
    )


def remeasure_inputs(ctx: SearchContext, runs: RunScheduler) -> remeasure.RemeasureInputs:
    """What the re-measure reads of the search (after the probe: its places), `runs`: the search's run
    scheduler."""
    confirming = bool(ctx.state.data.get("remembered"))
    return remeasure.RemeasureInputs(
        search=ctx.cfg.search,
        base=ctx.base,
        hw=ctx.hw,
        shapes=ctx.shapes,
        placement=ctx.placement,
        scheduler=runs,
        confirming=confirming,
        notice=ctx.notice,
    )


def finish_inputs(ctx: SearchContext) -> finish.FinishInputs:
    """What the answer reads of the search, once the re-measure is done."""
    c = ctx.cfg
    return finish.FinishInputs(
        search=c.search,
        resources=c.resources,
        base=ctx.base,
        hw=ctx.hw,
        shapes=ctx.shapes,
        placement=ctx.placement,
        out=ctx.out,
        state=ctx.state,
        telemetry=ctx.telemetry,
        notices=ctx.notices,
        command=ctx.command,
        compile_cache=ctx.compile_cache,
        workload=ctx.workload,
        knobs_left_out=ctx.knobs_left_out,
    )


def _remember(ctx: SearchContext, kept: Path, untrusted: bool) -> None:
    """This search kept for the next one with its fingerprint, unless its figures were untrusted: a
    confirmation would present them without the notices that said so."""
    phases = ctx.state.data["phases"]
    why = answers.untrusted_why(phases, untrusted)
    if why is not None:
        log(f"not remembered for a later search: {why}")
        return
    answers.remember(kept, ctx.state.data["fingerprint"], ctx.out, phases, untrusted)


def recall_answer(ctx: SearchContext, fresh: bool, kept: Path) -> bool:
    """A search that matches one finished earlier on this machine takes its probe, screen and loss check
    (as a resumed search takes its own) and re-measures its finalists and the baseline, to confirm."""
    key = ctx.state.data.setdefault(
        "fingerprint", answers.fingerprint(ctx.cfg, ctx.hw, ctx.workload.code_root if ctx.workload else None)
    )
    if ctx.state.data.get("remembered"):  # a resumed confirmation
        return True
    begun = any(ctx.state.phase(name) is not None for name in answers.REMEMBERED_PHASES)  # its own, resumed
    if begun or answers.fresh_asked(fresh):
        return False
    record = answers.recall(kept, key, say=ctx.notice)  # refused: untrusted, or its OUT gone or damaged
    if record is None:
        return False
    ctx.state.data["remembered"] = {"out": record["out"], "when": record["when"], "fingerprint": key}
    for name in answers.REMEMBERED_PHASES:
        ctx.state.finish(name, record["phases"][name], 0.0)
    log(
        f"remembered: this search matches one finished on {record['when']} ({record['out']}); re-measuring "
        "its finalists and the baseline to confirm its answer (--fresh searches anew)"
    )
    return True


def fit_to_hardware(cfg: SearchConfig, hw: Hardware, notices: Notices) -> tuple[dict[str, Any], TrainConfig]:
    """The space trimmed to what applies on the trials' hardware, and the baseline with the knobs left one
    choice fixed."""
    offered = recipe.in_space(cfg.search.space, cfg.search.recipe, cfg.train, hw.cuda)
    space, fixed, said = applicable(offered, hw.model_dump())
    base = with_fixed(cfg.train, fixed)
    if base.kernels == "fused" and not hw.cuda:
        raise EnvironmentFault("config key 'train.kernels': 'fused' needs CUDA workers (use torch or auto)")
    for n in said:
        notices.say(n)
    if autotune := autotune_notice(space, hw.model_dump()):
        notices.say(autotune)
    if fixed:
        notices.say(f"fixed (one choice left): {fixed}")
    for choice, why in cfg.search.left_out.items():
        notices.say(f"left out of the space: {choice}: {why}")
    return space, base


def with_fixed(base: TrainConfig, fixed: dict[str, Any]) -> TrainConfig:
    """The baseline with the knobs the hardware left one choice each, validated again: a fixed value that
    cannot train with the rest is one line (exit 2) here, before any trial, as the user's own values are."""
    try:
        return make_config({**base.model_dump(), **fixed}, section="train")
    except ConfigError as err:
        raise ConfigError(f"{err}; the search space leaves one choice of each here: {fixed}") from None


def open_context(
    cfg: SearchConfig,
    out: Path,
    *,
    resume: bool,
    command: str,
    compile_cache: str | None = None,
    workload: WorkloadInfo | None = None,
    inputs: TrialInputs | None = None,
) -> SearchContext:
    """The context every phase works with, frozen: the cluster's resources, the trials' hardware, the baseline
    and the space fitted to it, and the telemetry."""
    state = State(out)
    state.data.setdefault("config", cfg.model_dump())
    state.data.setdefault("command", command)
    state.save()
    resources = ray.cluster_resources()
    gpus = int(resources.get("GPU", 0))
    node_hw = state.run_phase(
        "hardware", lambda: Hardware(**on_a_trial_node(probe_hardware, gpu=bool(gpus))), Hardware
    )
    hw = node_hw.model_copy(update={"gpus": gpus})  # every GPU of the cluster, not just the probed node's
    notices = Notices()
    space, base = fit_to_hardware(cfg, hw, notices)
    return SearchContext(
        cfg=cfg,
        out=out,
        base=base,
        hw=hw,
        cluster_cpus=int(resources.get("CPU", 1)),
        node_cpus=max((int(n["Resources"].get("CPU", 0)) for n in ray.nodes() if n["Alive"]), default=0),
        state=state,
        command=command,
        resume=resume,
        telemetry=observe.start(cfg.search.telemetry_hz, hw.gpus > 0, notices.say),
        notices=notices,
        compile_cache=compile_cache,
        workload=workload,
        inputs=inputs or TrialInputs(),
        space=space,
    )
