"""The speed screen: Optuna's TPE proposes configs, never one twice, told each one's speed and, as the loss
runs beside the screen finish, which configs' loss cannot pass (tuner/space/sampler.py); each runs briefly,
several per GPU so their compile and warm-up overlap, and is timed alone on its GPU (the timing gate);
clearly slow ones are stopped early. The study lives in OUT/optuna.journal (or an RDB URL), so a resumed
search goes on with what TPE already learned. The screen plans its searcher (`TpeSearch`: seed, space, start
points, study, the loss verdicts so far); the run scheduler builds it where Tune runs
(tuner/runs/tune.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.storages import BaseStorage, JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from trainables.common.progress import log
from trainables.config import TrainConfig
from trainables.spec import TrialSpec
from tuner.config import Knob, SearchSection
from tuner.decide.screen_outcome import ScreenOutcome
from tuner.measure.screen_budget import screen_clock, wall_budget_s
from tuner.runs.placement import PlacementPolicy
from tuner.runs.request import Role, RunRequest, TpeSearch
from tuner.runs.scheduler import RunScheduler
from tuner.runs.shapes import RunShapes
from tuner.space.batch_fit import BatchFit
from tuner.space.recipe import start_points
from tuner.space.sampler import VerdictsNow
from tuner.state.hardware import ProbedBatch
from tuner.state.records import TrialRow

STUDY = "screen"
LEDGER = "screen"  # OUT/trials/screen.jsonl: its rows, told to the listeners of it as they come
optuna.logging.set_verbosity(optuna.logging.WARNING)  # our progress lines say what the study does


@dataclass(frozen=True, kw_only=True)
class ScreenInputs:
    """What the screen reads of the search (built in tuner/pipeline.py): the search section, whether the
    search resumes, the baseline, the GPUs, the run shapes, the placement and the probe's peaks, OUT (its
    study's journal), the search's run scheduler its runs go through (the listeners of its ledger, LEDGER,
    are told the rows so far as each trial finishes) and where notices go."""

    search: SearchSection
    resume: bool
    base: TrainConfig
    gpus: int
    shapes: RunShapes
    placement: PlacementPolicy
    probed: dict[str, ProbedBatch]
    out: Path
    scheduler: RunScheduler
    notice: Callable[[str], None]
    verdicts: VerdictsNow | None = None


def time_proposals(inputs: ScreenInputs, space: dict[str, Knob]) -> list[TrialRow]:
    """The screen's rows."""
    s = inputs.search
    storage = _storage(s, inputs.out)
    if inputs.resume:
        _fail_stale_trials(storage)
    points = start_points(s.start_points, s.recipe, space, inputs.base, inputs.notice)
    budget_s = wall_budget_s(s, inputs.gpus)
    clock = screen_clock(s, budget_s, points)

    searcher = TpeSearch(
        study=STUDY,
        storage=storage,
        seed=s.seed,
        startup_trials=max(2, min(8, s.trials // 3)),
        space=space,
        points=tuple(points),
        verdicts=inputs.verdicts,
    )
    short_run = TrialSpec.of({**inputs.shapes.case(Role.SPEED), "compile_deadline_s": s.compile_deadline_s})
    rows = inputs.scheduler.proposals(
        LEDGER,
        RunRequest(short_run, Role.SPEED),  # the searcher's knobs go over it
        inputs.placement.speed(),
        trials=s.trials,
        searcher=searcher,
        stopper_ratio=s.early_stop_ratio,
        clock=clock,
        fit=BatchFit(inputs.base, inputs.probed),  # none run that the probe found cannot fit
    )
    log(f"[screen] {ScreenOutcome.of(rows).line(budget_s)}")  # "finished 0 of 8" names its cause
    if clock is not None and len(rows) < s.trials and clock.elapsed() >= clock.budget_s:
        inputs.notice(
            f"the screen's time budget ended it after {len(rows)} of {s.trials} trials ({s.time_budget} of GPU "
            f"time, {budget_s:.0f} s of wall time here); --time-budget gives it more"
        )
    return [row.speed_only() for row in rows]  # the loss check measures their losses


def _storage(search: SearchSection, out: Path) -> BaseStorage:
    if search.storage:
        return optuna.storages.RDBStorage(search.storage)
    return JournalStorage(JournalFileBackend(str(out / "optuna.journal")))


def _fail_stale_trials(storage: BaseStorage) -> None:
    """Trials left RUNNING by a killed driver will never report: mark them failed so TPE ignores them."""
    try:
        study = optuna.load_study(study_name=STUDY, storage=storage)
    except KeyError:  # no study yet
        return
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        study.tell(trial.number, state=TrialState.FAIL, skip_if_finished=True)  # finished meanwhile: keep it
