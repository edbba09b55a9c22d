"""The speed screen: Optuna (TPE, through Ray Tune's OptunaSearch) proposes configs, never one twice; each
runs briefly, several per GPU so their compile and warm-up overlap, and is timed alone on its GPU (the
timing gate); clearly slow ones are stopped early. The study lives in OUT/optuna.journal (or an RDB URL), so
a resumed search goes on with what TPE already learned. The screen plans its searcher (`TpeSearch`: seed,
start points, study); the pool builds it where Tune runs (tuner/runs/tune.py)."""

from __future__ import annotations

from collections.abc import Callable

import optuna
from optuna.storages import BaseStorage, JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from trainables.spec import TrialSpec
from tuner.config import Knob
from tuner.context import SearchContext, log
from tuner.decide.screen_outcome import ScreenOutcome
from tuner.measure.screen_budget import screen_clock, wall_budget_s
from tuner.runs.pool import RunPool
from tuner.runs.request import Role, RunRequest, TpeSearch
from tuner.space.batch_fit import BatchFit
from tuner.space.domains import to_tune
from tuner.space.recipe import start_points
from tuner.state.records import TrialRow

STUDY = "screen"
optuna.logging.set_verbosity(optuna.logging.WARNING)  # our progress lines say what the study does


def run(
    ctx: SearchContext,
    space: dict[str, Knob],
    on_row: Callable[[list[TrialRow]], None] | None = None,
) -> list[TrialRow]:
    """The screen's rows; `on_row` is told the rows so far as each trial finishes."""
    s = ctx.cfg.search
    storage = _storage(ctx)
    if ctx.resume:
        _fail_stale_trials(storage)
    points = start_points(s.start_points, s.recipe, space, ctx.base, ctx.notice)
    budget_s = wall_budget_s(s, ctx.hw.gpus)
    clock = screen_clock(s, budget_s, points)

    searcher = TpeSearch(
        STUDY, storage, s.seed, startup_trials=max(2, min(8, s.trials // 3)), points=tuple(points)
    )
    short_run = TrialSpec.of({**ctx.shapes.case(Role.SPEED), "compile_deadline_s": s.compile_deadline_s})
    pool = RunPool(ctx, listeners=[on_row] if on_row is not None else [])
    rows = pool.proposals(
        "screen",
        RunRequest(short_run, Role.SPEED),  # the searcher's knobs go over it
        to_tune(space),
        ctx.placement.speed(),
        trials=s.trials,
        searcher=searcher,
        stopper_ratio=s.early_stop_ratio,
        clock=clock,
        fit=BatchFit(ctx.base, ctx.probed),  # none run that the probe found cannot fit
    )
    log(f"[screen] {ScreenOutcome.of(rows).line(budget_s)}")  # "finished 0 of 8" names its cause
    if clock is not None and len(rows) < s.trials and clock.elapsed() >= clock.budget_s:
        ctx.notice(
            f"the screen's time budget ended it after {len(rows)} of {s.trials} trials ({s.time_budget} of GPU "
            f"time, {budget_s:.0f} s of wall time here); --time-budget gives it more"
        )
    return [row.speed_only() for row in rows]  # the loss check measures their losses


def _storage(ctx: SearchContext) -> BaseStorage:
    if ctx.cfg.search.storage:
        return optuna.storages.RDBStorage(ctx.cfg.search.storage)
    return JournalStorage(JournalFileBackend(str(ctx.out / "optuna.journal")))


def _fail_stale_trials(storage: BaseStorage) -> None:
    """Trials left RUNNING by a killed driver will never report: mark them failed so TPE ignores them."""
    try:
        study = optuna.load_study(study_name=STUDY, storage=storage)
    except KeyError:  # no study yet
        return
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        study.tell(trial.number, state=TrialState.FAIL, skip_if_finished=True)  # finished meanwhile: keep it
