"""Running the trials of one phase as Ray Tune experiments, with a durable ledger of finished trials.

The driver appends each finished trial to OUT/trials/<phase>.jsonl the moment Ray reports it (flushed and
fsync'd). That ledger, not Ray's periodic experiment snapshot, is the record: after a crash, `--resume`
runs only what the ledger lacks, in a fresh experiment (OUT/ray/<phase>-r<k>), so no finished trial is
rerun and none is counted twice. Trials that were running when the driver died left no row: they rerun.
A trial lost with its node leaves no row either: the phase reruns it so (at most NODE_LOSS_RERUNS times).

On a cluster, OUT is the driver's alone: the trials get the corpus through Ray's object store
(`TrialInputs`, which the search context holds) and write no files; Tune's loggers write their results
and TensorBoard events into OUT/ray on the driver, from what they report.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray import tune
from ray.tune import Callback, Stopper
from ray.tune.stopper import CombinedStopper

from trainables.config import ConfigError
from trainables.data import Corpus
from trainables.progress import fmt_seconds, log
from trainables.spec import TRAIN, TrialSpec
from trainables.trainable import train_trial
from tuner.distinct import DistinctConfigs
from tuner.knobs import freeze
from tuner.node_loss import NODE_LOSS_RERUNS, died_with_node
from tuner.ray_noise import quiet_trial_failures
from tuner.records import TrialRow, short_node_id
from tuner.screen_clock import ScreenClock, ScreenEnd, seen_by
from tuner.stall import StallWatch
from tuner.stop_signals import TuneSigint
from tuner.trial_rows import trial_error, trial_row, untold_end

HEARTBEAT_S = 30  # the longest a phase stays silent


@dataclass(frozen=True)
class Placement:
    """How a phase's trials take the cluster: resources per trial (a dict, or a function of the trial's
    config), at most `concurrent` at once (0: as many as fit), warm workers reused or not, and whether their
    timed windows queue at their GPU's gate (speed runs that share a GPU): None, "turns" or "quiet"."""

    resources: dict[str, float] | Callable[[dict], dict[str, float]]
    concurrent: int = 0
    reuse_actors: bool = True
    gate: str | None = None


@dataclass(frozen=True)
class TrialInputs:
    """What every trial gets through Ray's object store (tune.with_parameters), not from its node's disk."""

    corpus: Corpus | None = None  # the corpus the driver resolved (None: each trial resolves its own)
    cache_server: str | None = None  # the name of the driver's compile-cache server (tuner/cache_server.py)


class Interrupted(KeyboardInterrupt):
    """A stop signal (Ctrl-C) ended a phase with trials unfinished: what finished is in the ledger;
    --resume goes on."""


class TuneFailed(RuntimeError):
    """Ray Tune ended a phase's experiment with trials unfinished, and no signal asked it to: a failure
    (exit 1, the search prints its cause and the resume command), never an interrupt."""


class Ledger:
    """OUT/trials/<phase>.jsonl: one row per finished trial, appended as it finishes."""

    def __init__(self, out: Path, phase: str):
        self.path = out / "trials" / f"{phase}.jsonl"
        self.phase = phase

    def rows(self) -> list[TrialRow]:
        if not self.path.exists():
            return []
        rows = []
        for line in self.path.read_text().splitlines():
            try:
                rows.append(TrialRow.model_validate_json(line))
            except ValueError:  # a line cut short by a crash: that trial reruns
                continue
        return rows

    def has(self, ray_trial_id: str) -> bool:
        return any(r.ray_trial_id == ray_trial_id for r in self.rows())

    def append(self, fields: dict[str, Any]) -> TrialRow:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        row = TrialRow(**fields, phase=self.phase, id=f"{self.phase}-{len(self.rows())}")
        with self.path.open("ab+") as f:
            if _ends_cut(f):
                f.write(b"\n")  # never onto a line cut short: that would lose this row too
            f.write(row.model_dump_json().encode() + b"\n")
            f.flush()
            os.fsync(f.fileno())
        return row


def _ends_cut(f) -> bool:
    """Whether the file's last line lacks its newline (a crash cut it short)."""
    if f.seek(0, os.SEEK_END) == 0:
        return False
    f.seek(-1, os.SEEK_END)
    return f.read(1) != b"\n"


class LedgerCallback(Callback):
    """Writes each finished trial to the ledger and prints one progress line: done/running/left, best, ETA."""

    def __init__(
        self,
        ledger: Ledger,
        total: int,
        already: int,
        budget_s: float | None = None,
        rerun_lost: bool = False,
        on_row: Callable[[list[TrialRow]], None] | None = None,
        planned_s: float | None = None,
    ):
        self.ledger, self.total, self.done = ledger, total, already
        self.on_row = on_row  # told the phase's rows each time one is added
        self.budget_s = budget_s  # the phase ends by then however many trials are left
        self.planned_s = planned_s  # the search's estimate of the phase (eta.py), where it made one
        self.rerun_lost = rerun_lost  # a trial lost with its node gets no row: the phase reruns it
        self.lost: list[str] = []  # the Ray trials lost with their nodes, left to rerun
        self.best = max((r.tokens_per_s or 0 for r in ledger.rows() if r.status == "ok"), default=0)
        self.started, self.new = time.time(), 0
        self.last_line = self.started
        self.trial_started: dict[str, float] = {}
        self.failure: Exception | None = None  # the first error of its own; _fit raises it after the run
        self.recorded = {r.ray_trial_id for r in ledger.rows()}  # Ray trials with a row, or lost
        self.untold: dict[str, str] = {}  # Ray trials Tune failed without telling us -> why, in words
        self.trials: list = []
        self.stall = StallWatch(ledger.phase)  # why no trial has advanced, when the host shows why

    def on_trial_start(self, iteration, trials, trial, **info):
        self.trial_started[trial.trial_id] = time.time()
        self.trials = trials  # Tune's own list of the experiment's trials, kept up to date by Tune

    def on_experiment_end(self, trials, **info):
        self.find_untold(trials)

    def find_untold(self, trials=None) -> bool:
        """Whether Tune failed a trial without calling on_trial_error (a reused worker it could not reset;
        its searcher is not told either, and a concurrency limit then waits on it for 10 minutes): it has
        no row, the experiment stops (LedgerFailed) and the phase fails naming it."""
        for trial in self.trials if trials is None else trials:
            if trial.status == "ERROR" and trial.trial_id not in self.recorded | self.untold.keys():
                self.untold[trial.trial_id] = untold_end(trial)
        return bool(self.untold)

    def on_step_begin(self, iteration, trials, **info):
        """A line at least every HEARTBEAT_S: each running trial's tokens, speed and ETA, or its warm-up."""
        now = time.time()
        if now - self.last_line < HEARTBEAT_S:
            return
        running = [t for t in trials if t.status == "RUNNING"]
        parts = [self._progress(t, now) for t in running[:6]]
        self._say(
            f"[{self.ledger.phase}] {self.done}/{self.total} done, {len(running)} running"
            + (": " + "; ".join(parts) if parts else "")
            + f" | {fmt_seconds(now - self.started)} in this phase"
        )
        pids = [t.last_result["pid"] for t in running if (t.last_result or {}).get("pid")]
        warming = [_label(t.config) for t in running if not (t.last_result or {}).get("tokens_per_s")]
        waiting = sum(1 for t in trials if t.status in ("RUNNING", "PENDING"))  # PENDING: a worker starting
        if why := self.stall.explain(waiting, pids, warming, now):
            self._say(why)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if result.get("tokens"):  # trained tokens: a trial's first report (where it runs) is no progress
            self.stall.advanced()

    def _progress(self, trial, now: float) -> str:
        result = trial.last_result or {}
        label = _label(trial.config)
        tokens, speed = result.get("tokens"), result.get("tokens_per_s")
        total = _planned_tokens(trial.config)
        if not tokens or not speed or not total:
            return f"{label} warming up {fmt_seconds(now - self.trial_started.get(trial.trial_id, now))}"
        eta = max(0.0, total - tokens) / speed
        return f"{label} {tokens / 1e6:.2f}M/{total / 1e6:.2f}M tokens, {speed:,.0f} tok/s, ETA {fmt_seconds(eta)}"

    def _say(self, line: str) -> None:
        log(line)
        self.last_line = time.time()

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._guarded(lambda: self._finish(trials, trial, None))

    def on_trial_error(self, iteration, trials, trial, **info):
        self._guarded(lambda: self._finish(trials, trial, trial_error(trial)))

    def _guarded(self, record: Callable[[], None]) -> None:
        """Ray Tune turns a callback's exception into a failure of the trial it is about: a trial that
        finished would be recorded as failed. An error of the record's own (a full disk, a bug) is kept
        instead, the experiment stops (LedgerFailed) and the phase fails with it."""
        if self.failure is not None:
            return
        try:
            record()
        except Exception as err:  # noqa: BLE001 - raised by _fit once Tune has stopped
            self.failure = err

    def _finish(self, trials, trial, error):
        self.recorded.add(trial.trial_id)  # from here on, told: a row, a rerun, or a record's failure
        self.stall.advanced()
        if self.ledger.has(trial.trial_id):  # one row per Ray trial: a finished trial is never rewritten
            return
        fields = trial_row(trial.last_result, _spec(trial.config), error, trial.path, trial.trial_id)
        if error is not None and died_with_node(error, fields["node_id"]):
            node = short_node_id(fields["node_id"])
            if self.rerun_lost:  # no row: the phase runs it again
                self.lost.append(trial.trial_id)
                self._say(
                    f"[{self.ledger.phase}] Ray trial {trial.trial_id} was lost with its node {node}: reruns"
                )
                return
            fields["error"] = f"NodeDied: the trial's node {node} died, and the trial with it"
        row = self.ledger.append(fields)
        if self.on_row is not None:
            self.on_row(self.ledger.rows())
        self.done += 1
        self.new += 1
        if row.status == "error":
            self._say(f"[{self.ledger.phase}] {row.id} (Ray trial {trial.trial_id}) failed: {row.error}")
        if row.status == "ok" and row.tokens_per_s:
            self.best = max(self.best, row.tokens_per_s)
        running = sum(1 for t in trials if t.status == "RUNNING" and t is not trial)
        left = max(0, self.total - self.done - running)
        eta = self._eta(time.time())
        speed = f" {row.tokens_per_s:,.0f} tok/s" if row.tokens_per_s else ""
        self._say(
            f"[{self.ledger.phase}] {self.done}/{self.total} done, {running} running, {left} left | "
            f"last {row.status}{speed} | best {self.best:,.0f} tok/s | ETA {fmt_seconds(eta)}"
        )

    def _eta(self, now: float) -> float:
        """Seconds left: the pace of the trials finished so far, over those left. Runs that start together
        finish close together, so at first that pace is far too slow (run Q's re-measure said 12m34s after
        the first of its 15 runs, 65 s before its end); the phase's estimate bounds it while that has time
        left, and the time budget always."""
        eta = (now - self.started) / self.new * (self.total - self.done)
        if self.planned_s is not None and (planned_left := self.started + self.planned_s - now) > 0:
            eta = min(eta, planned_left)
        if self.budget_s is not None:
            eta = min(eta, max(0.0, self.started + self.budget_s - now))
        return eta


def _spec(config: dict[str, Any]) -> TrialSpec:
    """The spec a trial's Tune config carries, as the trial reads it, or as asked where it refused it."""
    try:
        return TrialSpec.of_tune(config)
    except ConfigError:
        return TrialSpec.as_asked(config)


def _label(config: dict) -> str:
    """A trial in a few words: its case number, or the knobs that say most about its speed."""
    labels = _spec(config).labels
    if labels.case is not None:
        return f"case {labels.case}" + (f"#{labels.repeat}" if labels.repeat else "")
    knobs = [str(config[k]) for k in ("batch_size", "precision", "compile", "kernels") if k in config]
    return "/".join(knobs) or "trial"


def _planned_tokens(config: dict) -> int | None:
    try:
        cfg = TrialSpec.of_tune(config).train  # as the trial itself reads it
    except ConfigError:
        return None
    return cfg.total_steps * cfg.tokens_per_step


class LedgerFailed(Stopper):
    """Ends the experiment once its LedgerCallback could not record a trial, or Tune failed one untold."""

    def __init__(self, record: LedgerCallback):
        self.record = record

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return False

    def stop_all(self) -> bool:
        return self.record.failure is not None or self.record.find_untold()


class SlowTrialStopper(Stopper):
    """Stops a screen trial whose steady-state speed is clearly below the best finished one."""

    def __init__(self, ratio: float, best: float = 0.0):
        self.ratio, self.best = ratio, best

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        speed = result.get("tokens_per_s") or 0.0
        if result.get("done"):
            if result.get("status") == "ok":
                self.best = max(self.best, speed)
            return False
        return self.ratio > 0 and speed > 0 and self.best > 0 and speed < self.ratio * self.best

    def stop_all(self) -> bool:
        return False


def _fit(
    ledger: Ledger,
    out: Path,
    param_space,
    placement: Placement,
    *,
    total,
    already,
    rerun_lost: bool = False,
    inputs: TrialInputs,
    on_row: Callable[[list[TrialRow]], None] | None = None,
    planned_s: float | None = None,
    **tune_kwargs,
) -> LedgerCallback:
    """One Tune experiment; tune_kwargs go to TuneConfig except `stopper` (to RunConfig) and `budget_s` (the
    wall time the progress lines count down; the stopper ends the phase). Returns
    its record: the trials lost with their nodes and left unrecorded (`lost`, with `rerun_lost`) for the
    caller to rerun, and those Tune ended without a row (`untold`). A Ctrl-C that Tune caught (it returns
    from fit() early) is Interrupted."""
    quiet_trial_failures()
    storage = (out / "ray").resolve()
    attempt = sum(1 for p in storage.glob(f"{ledger.phase}*") if p.is_dir()) if storage.exists() else 0
    name = ledger.phase if attempt == 0 else f"{ledger.phase}-r{attempt}"
    budget = tune_kwargs.pop("budget_s", None)  # for the progress lines: the stopper ends the phase
    record = LedgerCallback(ledger, total, already, budget, rerun_lost, on_row, planned_s)
    stoppers = [s for s in (tune_kwargs.pop("stopper", None), LedgerFailed(record)) if s is not None]
    sigint = TuneSigint()  # made now: the SIGINT handler Tune will replace is the one in place
    trainable = tune.with_parameters(
        train_trial, timing_gate=placement.gate, corpus=inputs.corpus, cache_server=inputs.cache_server
    )
    # Tune names each trial actor (its repr in the dashboard) and trial after the function: say the phase.
    trainable.__name__ = f"{ledger.phase}_trial"
    tuner = tune.Tuner(
        tune.with_resources(trainable, placement.resources),
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
            callbacks=[record, sigint],
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
        raise Interrupted(f"{ledger.phase}: {len(ledger.rows())} of {total} trials finished")
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
) -> list[TrialRow]:
    """Each trial in `cases`, `repeats` times (or repeats[i] times for case i); rows in case order, one per
    (case, repeat), labelled as their specs are (the runner adds case and repeat). The runs go round robin (every case's first repeat, then every case's
    second, ...), so a burst of outside load lands on all the cases alike, not on one case's repeats.
    `planned_s`, the search's estimate of the phase, bounds the ETA of its progress lines."""
    ledger = Ledger(out, phase)
    counts = [repeats] * len(cases) if isinstance(repeats, int) else list(repeats)
    total = sum(counts)
    untold: list[str] = []
    for attempt in range(NODE_LOSS_RERUNS + 1):
        done = {(r.case, r.repeat) for r in ledger.rows()}
        pending = [
            cases[i].labelled(case=i, repeat=rep).as_tune()[TRAIN]
            for i, rep in round_robin(counts)
            if (i, rep) not in done
        ]
        if not pending:
            break
        _say_going_on(phase, attempt, len(done), total)
        record = _fit(
            ledger,
            out,
            {TRAIN: tune.grid_search(pending)},
            placement,
            total=total,
            already=len(done),
            rerun_lost=attempt < NODE_LOSS_RERUNS,
            inputs=inputs,
            planned_s=planned_s,
        )
        untold = list(record.untold.values())
        if not record.lost:
            break
    rows = ledger.rows()
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
) -> list[TrialRow]:
    """Up to `trials` searcher-proposed trials in total, across resumes, never one config twice (fewer
    when the searcher keeps repeating measured configs: the space is exhausted); rows in completion order;
    `on_row` is told the rows so far as each one finishes; `clock` says when to stop proposing and when
    the experiment ends (tuner/screen_clock.py; None: when the trials are done).
    Trials lost with their nodes are proposed anew, in a fresh experiment with a fresh searcher (the study
    and the ledger carry what was learned)."""
    ledger = Ledger(out, phase)
    answered, exhausted, untold = 0, False, []
    for attempt in range(NODE_LOSS_RERUNS + 1):
        done = ledger.rows()
        remaining = trials - len(done)
        budget = None if clock is None else clock.budget_s - clock.elapsed()
        if remaining <= 0 or (budget is not None and budget <= 0):
            break
        searcher = DistinctConfigs(make_searcher(), {freeze(r.config): r.tokens_per_s or 0.0 for r in done})
        if clock is not None:
            searcher.may_propose = lambda s=searcher: clock.proposing(seen_by(s)[1])
        _say_going_on(phase, attempt, len(done), trials)
        best = max((r.tokens_per_s or 0 for r in done if r.status == "ok"), default=0.0)
        slow = SlowTrialStopper(stopper_ratio, best)
        record = _fit(
            ledger,
            out,
            param_space,
            placement,
            total=trials,
            already=len(done),
            rerun_lost=attempt < NODE_LOSS_RERUNS,
            inputs=inputs,
            on_row=on_row,
            search_alg=searcher,
            num_samples=remaining,
            budget_s=budget,
            stopper=slow if clock is None else CombinedStopper(ScreenEnd(clock, searcher), slow),
        )
        answered, exhausted, untold = (
            answered + searcher.answered,
            searcher.exhausted,
            list(record.untold.values()),
        )
        if not record.lost:
            break
    rows = ledger.rows()
    out_of_time = clock is not None and clock.elapsed() >= clock.budget_s * 0.95
    if answered:
        log(f"[{phase}] {answered} repeated proposals answered from earlier measurements, not rerun")
    if len(rows) < trials and not (out_of_time or exhausted):  # no signal: that was Interrupted
        raise TuneFailed(ended_early(phase, len(rows), trials, untold))
    return rows


def ended_early(phase: str, finished: int, total: int, untold: list[str]) -> str:
    """One line: how far the phase got, and why Tune ended it, where it said."""
    why = f": {untold[0]}" + (f" (and {len(untold) - 1} more)" if len(untold) > 1 else "") if untold else ""
    return f"{phase}: Ray Tune ended the experiment with {finished} of {total} trials finished{why}"
