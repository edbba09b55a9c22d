"""The speed screen: Optuna (TPE, through Ray Tune's OptunaSearch) proposes configs, never one twice; each
runs briefly, several per GPU so their compile and warm-up overlap, and is timed alone on its GPU (the
timing gate); clearly slow ones are stopped early. The study lives in OUT/optuna.journal (or an RDB URL), so
a resumed search goes on with what TPE already learned."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState
from ray.tune.search.optuna import OptunaSearch

from trainables.spec import TrialSpec
from tuner.config import Knob, Range
from tuner.context import SearchContext, log
from tuner.knobs import freeze
from tuner.observe import annotate
from tuner.records import TrialRow
from tuner.runs.tune import run_proposals
from tuner.screen_clock import ScreenClock
from tuner.select import ScreenOutcome
from tuner.space import to_tune

STUDY = "screen"
optuna.logging.set_verbosity(optuna.logging.WARNING)  # our progress lines say what the study does


def run(
    ctx: SearchContext, space: dict[str, Knob], on_row: Callable[[list[TrialRow]], None] | None = None
) -> list[TrialRow]:
    """The screen's rows; `on_row` is told the rows so far as each trial finishes."""
    s = ctx.cfg.search
    storage = _storage(ctx)
    if ctx.resume:
        _fail_stale_trials(storage)
    points = [p for p in (start_point(ctx, point, space) for point in s.start_points) if p]
    budget_s = wall_budget_s(ctx)
    clock = screen_clock(ctx, budget_s, points)

    def make_searcher() -> OptunaSearch:
        return OptunaSearch(
            points_to_evaluate=points or None,
            metric="tokens_per_s",
            mode="max",
            sampler=optuna.samplers.TPESampler(seed=s.seed, n_startup_trials=max(2, min(8, s.trials // 3))),
            study_name=STUDY,
            storage=storage,
        )

    rows = run_proposals(
        "screen",
        ctx.out,
        {
            **TrialSpec.of({**ctx.short_run({}), "compile_deadline_s": s.compile_deadline_s}).as_tune(),
            **to_tune(space),
        },
        ctx.placement.speed(),
        trials=s.trials,
        make_searcher=make_searcher,
        stopper_ratio=s.early_stop_ratio,
        clock=clock,
        inputs=ctx.inputs,
        on_row=on_row,
    )
    log(f"[screen] {ScreenOutcome.of(rows).line(budget_s)}")  # "finished 0 of 8" names its cause
    if clock is not None and len(rows) < s.trials and clock.elapsed() >= clock.budget_s:
        ctx.notice(
            f"the screen's time budget ended it after {len(rows)} of {s.trials} trials ({s.time_budget} of GPU "
            f"time, {budget_s:.0f} s of wall time here); --time-budget gives it more"
        )
    return annotate(ctx, [row.speed_only() for row in rows])  # the loss check measures their losses


def wall_budget_s(ctx: SearchContext) -> float | None:
    """`search.time_budget` is GPU time: N GPUs screen N configs at once, so they spend it in 1/N of the
    wall time, and finish as many proposals as one GPU would in the whole budget. Its floor is not a
    constant: the screen ends only once its start points are done (screen_clock)."""
    s = ctx.cfg.search
    if s.time_budget_s is None:
        return None
    gpus = max(1, ctx.hw.gpus)
    wall = s.time_budget_s / gpus
    if gpus > 1:
        log(
            f"[screen] time budget {s.time_budget} of GPU time over {gpus} GPUs: {wall:.0f} s of wall time, "
            "longer only while a start point is still running"
        )
    return wall


def screen_clock(
    ctx: SearchContext, budget_s: float | None, points: list[dict[str, Any]]
) -> ScreenClock | None:
    """The screen ends at its budget once no start point is running, and at its budget plus the compile
    deadline regardless (a trial gives up its first step by then)."""
    if budget_s is None:
        return None
    deadline = ctx.cfg.search.compile_deadline_s
    return ScreenClock(budget_s, budget_s + (deadline or budget_s), frozenset(map(freeze, points)))


def _storage(ctx: SearchContext):
    if ctx.cfg.search.storage:
        return optuna.storages.RDBStorage(ctx.cfg.search.storage)
    return JournalStorage(JournalFileBackend(str(ctx.out / "optuna.journal")))


def start_point(ctx: SearchContext, point: dict[str, Any], space: dict[str, Knob]) -> dict[str, Any] | None:
    """A full point of the space: named knobs as given, the rest the baseline's value (or the first choice)."""
    full = {}
    for name, knob in space.items():
        value = point.get(name, ctx.base[name])
        ok = knob.low <= value <= knob.high if isinstance(knob, Range) else value in knob
        if not ok and name in point:
            ctx.notice(f"start point {point} skipped: {name}={value!r} does not apply here")
            return None
        full[name] = value if ok else (knob.low if isinstance(knob, Range) else knob[0])
    return full


def _fail_stale_trials(storage) -> None:
    """Trials left RUNNING by a killed driver will never report: mark them failed so TPE ignores them."""
    try:
        study = optuna.load_study(study_name=STUDY, storage=storage)
    except KeyError:  # no study yet
        return
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        study.tell(trial.number, state=TrialState.FAIL, skip_if_finished=True)  # finished meanwhile: keep it
