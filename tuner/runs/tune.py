"""Running the trials of one phase as Ray Tune experiments: a fixed list (`run_cases`) or a searcher's
proposals (`run_proposals`), each finished trial recorded in the phase's ledger (tuner/runs/ledger.py).

On a cluster, OUT is the driver's alone: the trials get the corpus through Ray's object store
(`TrialInputs`, which the search context holds) and write no files; Tune's loggers write their results
and TensorBoard events into OUT/ray on the driver, from what they report.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray import tune
from ray.tune import Stopper
from ray.tune.stopper import CombinedStopper

from trainables.common.progress import log
from trainables.spec import TRAIN, TrialSpec
from trainables.trainable import train_trial
from tuner.runs.ledger import Ledger, LedgerRecorder
from tuner.runs.phase_progress import PhaseProgress
from tuner.runs.request import Placement, Role, TpeSearch, TrialInputs, spec_key
from tuner.runs.screen_clock import ScreenClock, ScreenEnd, ScreenStarts, seen_by
from tuner.session.node_loss import NODE_LOSS_RERUNS
from tuner.session.ray_noise import quiet_trial_failures
from tuner.session.stop_signals import TuneSigint
from tuner.space.batch_fit import BatchFit
from tuner.space.knobs import freeze
from tuner.space.sampler import LossAwareTpe, open_study
from tuner.space.searcher import ScreenSearcher
from tuner.state.records import TrialRow


class Interrupted(KeyboardInterrupt):
    """A stop signal (Ctrl-C) ended a phase with trials unfinished: what finished is in the ledger;
    --resume goes on."""


class TuneFailed(RuntimeError):
    """Ray Tune ended a phase's experiment with trials unfinished, and no signal asked it to: a failure
    (exit 1, the search prints its cause and the resume command), never an interrupt."""


class LedgerFailed(Stopper):
    """Ends the experiment once its LedgerRecorder could not record a trial, or Tune failed one untold."""

    def __init__(self, record: LedgerRecorder):
        self.record = record

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return False

    def stop_all(self) -> bool:
        return self.record.failure is not None or self.record.find_untold()


class SlowTrialStopper(Stopper):
    """Stops a screen trial whose steady-state speed is clearly below the best finished one, except the
    start points (`keep`): they run to the end, since the baseline's and the recipe's figures are what the
    answer is read against, and a stopped figure is a partial one (an H200's nanoGPT recipe stopped at 706K
    tok/s in the screen ran 1.12M alone, 2026-11-29) that the loss check does not take."""

    def __init__(self, ratio: float, best: float = 0.0, keep: Sequence[dict[str, Any]] = ()):
        self.ratio, self.best, self.keep = ratio, best, [dict(point) for point in keep]

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        speed = result.get("tokens_per_s") or 0.0
        if result.get("done"):
            if result.get("status") == "ok":
                self.best = max(self.best, speed)
            return False
        if self._kept(result.get("config") or {}):
            return False
        return self.ratio > 0 and speed > 0 and self.best > 0 and speed < self.ratio * self.best

    def _kept(self, config: dict[str, Any]) -> bool:
        return any(all(config.get(k) == v for k, v in point.items()) for point in self.keep)

    def stop_all(self) -> bool:
        return False


def _trainable(phase: str, role: Role | None, inputs: TrialInputs) -> Any:
    """The trial function with what every trial of the phase gets: its timing-gate policy, the corpus and
    the compile caches' server (through Ray's object store)."""
    trainable = tune.with_parameters(
        train_trial,
        timing_gate=role.timing_gate if role else None,
        corpus=inputs.corpus,
        cache_server=inputs.cache_server,
    )
    # Tune names each trial actor (its repr in the dashboard) and trial after the function: say the phase.
    trainable.__name__ = f"{phase}_trial"
    return trainable


@dataclass(frozen=True)
class _Experiment:
    """What every Tune experiment of one phase shares: its ledger and OUT, where its trials run, what they
    get through the object store, and what they are for (`role`: their timing-gate policy, part of each
    row's spec key). A phase fits one, and one more for each rerun of trials lost with their nodes."""

    ledger: Ledger
    out: Path
    placement: Placement
    inputs: TrialInputs
    role: Role | None

    def fit(
        self,
        param_space: dict[str, Any],
        *,
        total: int,
        already: int,
        rerun: int,
        on_row: Callable[[list[TrialRow]], None] | None = None,
        planned_s: float | None = None,
        callbacks: Sequence[Any] = (),
        **tune_kwargs,
    ) -> LedgerRecorder:
        """One Tune experiment (`rerun`: how many came before it in this call, each for trials lost with
        their nodes); tune_kwargs go to TuneConfig except `stopper` (to RunConfig) and `budget_s` (the wall
        time the progress lines count down; the stopper ends the phase). Returns its record: the trials lost
        with their nodes and left unrecorded (`lost`, while reruns remain) for the caller to rerun, and those
        Tune ended without a row (`untold`). A Ctrl-C that Tune caught (it returns from fit() early) is
        Interrupted."""
        _say_going_on(self.ledger.phase, rerun, already, total)
        budget = tune_kwargs.pop("budget_s", None)  # for the progress lines: the stopper ends the phase
        progress = PhaseProgress(
            self.ledger.phase, total, already, self.ledger.best_speed(), budget, planned_s
        )
        record = LedgerRecorder(self.ledger, rerun < NODE_LOSS_RERUNS, on_row, self.role, progress)
        return _fit(self, param_space, record, progress, callbacks, tune_kwargs)


def _fit(
    exp: _Experiment,
    param_space: dict[str, Any],
    record: LedgerRecorder,
    progress: PhaseProgress,
    callbacks: Sequence[Any],
    tune_kwargs: dict[str, Any],
) -> LedgerRecorder:
    quiet_trial_failures()
    ledger, placement = exp.ledger, exp.placement
    storage = (exp.out / "ray").resolve()
    attempt = sum(1 for p in storage.glob(f"{ledger.phase}*") if p.is_dir()) if storage.exists() else 0
    name = ledger.phase if attempt == 0 else f"{ledger.phase}-r{attempt}"
    stoppers = [s for s in (tune_kwargs.pop("stopper", None), LedgerFailed(record)) if s is not None]
    sigint = TuneSigint()  # made now: the SIGINT handler Tune will replace is the one in place
    tuner = tune.Tuner(
        # a callable's resource dict is made a placement group by Tune (experiment/trial.py), though
        # with_resources' annotation names only factories for callables
        tune.with_resources(_trainable(ledger.phase, exp.role, exp.inputs), placement.resources),  # type: ignore[arg-type]
        param_space=param_space,
        tune_config=tune.TuneConfig(
            trial_dirname_creator=lambda trial: f"{name}_{trial.trial_id}",
            max_concurrent_trials=placement.concurrent or None,
            reuse_actors=placement.reuse_actors,  # warm workers: torch imported, caches loaded
            **tune_kwargs,
        ),
        run_config=tune.RunConfig(
            name=name,
            storage_path=str(storage),
            stop=CombinedStopper(*stoppers),
            callbacks=[record, progress, *callbacks, sigint],
            failure_config=tune.FailureConfig(max_failures=0),
            verbose=0,
        ),
    )
    try:
        tuner.fit()
    finally:
        ctrl_c = sigint.restore()  # whatever ended the fit, the search's SIGINT handler is back
    if record.failure is not None:
        raise record.failure
    if ctrl_c:
        raise Interrupted(f"{ledger.phase}: {len(ledger.rows())} of {progress.total} trials finished")
    return record


def run_cases(
    phase: str,
    out: Path,
    cases: list[TrialSpec],
    placement: Placement,
    *,
    repeats: int | Sequence[int] = 1,
    inputs: TrialInputs = TrialInputs(),
    planned_s: float | None = None,
    role: Role | None = None,
) -> list[TrialRow]:
    """Each trial in `cases`, `repeats` times (or repeats[i] times for case i); rows in case order, one per
    (case, repeat), labelled as their specs are (the runner adds case and repeat). The runs go round robin (every case's first repeat, then every case's
    second, ...), so a burst of outside load lands on all the cases alike, not on one case's repeats.
    A run whose spec key (its config, labels and `role`) has a row in the phase's ledger is done, not rerun.
    `planned_s`, the search's estimate of the phase, bounds the ETA of its progress lines."""
    ledger = Ledger(out, phase)
    experiment = _Experiment(ledger, out, placement, inputs, role)
    counts = [repeats] * len(cases) if isinstance(repeats, int) else list(repeats)
    wanted = {(i, rep): cases[i].labelled(case=i, repeat=rep) for i, rep in round_robin(counts)}
    keys = {at: spec_key(spec, role) for at, spec in wanted.items()}
    total = len(wanted)
    untold: list[str] = []
    for attempt in range(NODE_LOSS_RERUNS + 1):
        done = ledger.finished(keys)
        pending = [spec.as_tune()[TRAIN] for at, spec in wanted.items() if at not in done]
        if not pending:
            break
        grid = {TRAIN: tune.grid_search(pending)}
        record = experiment.fit(grid, total=total, already=len(done), rerun=attempt, planned_s=planned_s)
        untold = list(record.untold.values())
        if not record.lost:
            break
    rows = list(ledger.finished(keys).values())
    if len(rows) < total:  # no signal (that was Interrupted): Tune itself ended the experiment early
        raise TuneFailed(ended_early(phase, len(rows), total, untold))
    return sorted(rows, key=lambda r: (r.case, r.repeat))


def round_robin(counts: Sequence[int]) -> list[tuple[int, int]]:
    """(case, repeat) pairs, repeat by repeat: [2, 1] -> (0, 0), (1, 0), (0, 1)."""
    return [(i, rep) for rep in range(max(counts, default=0)) for i, n in enumerate(counts) if rep < n]


def _say_going_on(phase: str, attempt: int, done: int, total: int) -> None:
    if attempt > 0:
        log(f"[{phase}] rerunning the trials lost with their nodes")
    elif done:  # a resume, or the re-measure timing contended windows again
        log(f"[{phase}] {done} of {total} trials already done; running the rest")


def run_proposals(
    phase: str,
    out: Path,
    param_space: dict[str, Any],
    placement: Placement,
    *,
    trials: int,
    make_searcher,
    stopper_ratio: float,
    clock: ScreenClock | None,
    inputs: TrialInputs = TrialInputs(),
    on_row: Callable[[list[TrialRow]], None] | None = None,
    role: Role | None = None,
    fit: BatchFit | None = None,
    keep: Sequence[dict[str, Any]] = (),
) -> list[TrialRow]:
    """Up to `trials` searcher-proposed trials in total, across resumes, never one config twice (fewer
    when the searcher keeps repeating measured configs: the space is exhausted); rows in completion order;
    `on_row` is told the rows so far as each one finishes; `clock` says when to stop proposing and when
    the experiment ends (tuner/runs/screen_clock.py; None: when the trials are done).
    Trials lost with their nodes are proposed anew, in a fresh experiment with a fresh searcher (the study
    and the ledger carry what was learned)."""
    ledger = Ledger(out, phase)
    experiment = _Experiment(ledger, out, placement, inputs, role)
    answered, exhausted, untold = 0, False, []
    for attempt in range(NODE_LOSS_RERUNS + 1):
        done = ledger.rows()
        remaining = trials - len(done)
        budget = None if clock is None else clock.budget_s - clock.elapsed()
        if remaining <= 0 or (budget is not None and budget <= 0):
            break
        searcher = _distinct(make_searcher(), done, fit, clock, placement)
        best = max((r.tokens_per_s or 0 for r in done if r.status == "ok"), default=0.0)
        slow = SlowTrialStopper(stopper_ratio, best, keep)
        record = experiment.fit(
            param_space,
            total=trials,
            already=len(done),
            rerun=attempt,
            on_row=on_row,
            search_alg=searcher,
            num_samples=remaining,
            budget_s=budget,
            stopper=slow if clock is None else CombinedStopper(ScreenEnd(clock, searcher), slow),
            callbacks=() if clock is None else (ScreenStarts(clock),),
        )
        answered, exhausted = answered + searcher.answered, searcher.exhausted
        untold = list(record.untold.values())
        if not record.lost:
            break
    if answered:
        log(f"[{phase}] {answered} repeated proposals answered from earlier measurements, not rerun")
    return _all_or_why(ledger.rows(), phase, trials, clock, exhausted, untold)


def _distinct(
    tpe: LossAwareTpe,
    done: list[TrialRow],
    fit: BatchFit | None,
    clock: ScreenClock | None,
    placement: Placement,
) -> ScreenSearcher:
    """The searcher that never proposes a config measured (`done`) or one that cannot fit (`fit`:
    tuner/space/batch_fit.py's rules), and proposes only while the clock and the cluster's room allow."""
    measured = {freeze(r.config): r.tokens_per_s or 0.0 for r in done}
    distinct = ScreenSearcher(tpe, measured, fit)
    if clock is not None:
        distinct.may_propose = lambda s=distinct: clock.proposing(seen_by(s)[1], placement.room, s.running)
    return distinct


def _all_or_why(
    rows: list[TrialRow], phase: str, trials: int, clock: ScreenClock | None, exhausted: bool, untold: list
) -> list[TrialRow]:
    """The rows, where the phase ran all its trials, ran out of time or of configs; else why it ended."""
    out_of_time = clock is not None and clock.elapsed() >= clock.budget_s * 0.95
    if len(rows) < trials and not (out_of_time or exhausted):  # no signal: that was Interrupted
        raise TuneFailed(ended_early(phase, len(rows), trials, untold))
    return rows


def tpe_searcher(search: TpeSearch) -> LossAwareTpe:
    """A fresh sampler for one experiment of `run_proposals` (a rerun after a node loss gets another, seeded
    alike: the study carries what the first learned)."""
    return open_study(
        search.study,
        search.storage,
        search.seed,
        search.startup_trials,
        search.space,
        search.points,
        search.verdicts,
    )


def ended_early(phase: str, finished: int, total: int, untold: list[str]) -> str:
    """One line: how far the phase got, and why Tune ended it, where it said."""
    why = f": {untold[0]}" + (f" (and {len(untold) - 1} more)" if len(untold) > 1 else "") if untold else ""
    return f"{phase}: Ray Tune ended the experiment with {finished} of {total} trials finished{why}"
