"""What a phase says while it runs: a heartbeat line at least every HEARTBEAT_S (each running trial's
tokens, speed and ETA, or its warm-up, and why none advances where the host shows why), and one line per
finished trial (done/running/left, the last and the best speed, the phase's ETA). A Ray Tune callback of its
own, beside the ledger's (tuner/runs/ledger.py:LedgerRecorder), which records the trials and tells this what
it recorded."""

from __future__ import annotations

import time
from typing import Any

from ray.tune import Callback

from trainables.common.progress import fmt_seconds, log, per_second
from trainables.config import ConfigError
from trainables.spec import TrialSpec
from tuner.runs.stall import StallWatch
from tuner.state.records import TrialRow

HEARTBEAT_S = 30  # the longest a phase stays silent


class PhaseProgress(Callback):
    """The progress lines of one phase: `total` trials, `done` of them finished (those in its ledger too);
    `best`, the best speed of those (Ledger.best_speed)."""

    def __init__(
        self,
        phase: str,
        total: int,
        done: int,
        best: float,
        budget_s: float | None = None,
        planned_s: float | None = None,
    ):
        self.phase, self.total, self.done, self.best = phase, total, done, best
        self.budget_s = budget_s  # the phase ends by then however many trials are left
        self.planned_s = planned_s  # the search's estimate of the phase (eta.py), where it made one
        self.started, self.new = time.time(), 0
        self.unit = "tokens"  # what the speeds count, as the trials report it (a failed one may not)
        self.last_line = self.started
        self.eta_s: float | None = None  # the phase's ETA as its last finished-trial line said it
        self.trial_started: dict[str, float] = {}
        self.stall = StallWatch(phase)  # why no trial has advanced, when the host shows why

    def on_trial_start(self, iteration, trials, trial, **info):
        self.trial_started[trial.trial_id] = time.time()

    def on_step_begin(self, iteration, trials, **info):
        self.heartbeat(trials, time.time())

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if result.get("tokens"):  # trained tokens: a trial's first report (where it runs) is no progress
            self.stall.advanced()

    def say(self, line: str) -> None:
        log(line)
        self.last_line = time.time()

    def heartbeat(self, trials, now: float) -> None:
        """A line at least every HEARTBEAT_S: each running trial's tokens, speed and ETA, or its warm-up."""
        if now - self.last_line < HEARTBEAT_S:
            return
        running = [t for t in trials if t.status == "RUNNING"]
        parts = [self._progress(t, now) for t in running[:6]]
        self.say(
            f"[{self.phase}] {self.done}/{self.total} done, {len(running)} running"
            + (": " + "; ".join(parts) if parts else "")
            + f" | {fmt_seconds(now - self.started)} in this phase"
        )
        pids = [t.last_result["pid"] for t in running if (t.last_result or {}).get("pid")]
        warming = [_label(t.config) for t in running if not (t.last_result or {}).get("tokens_per_s")]
        waiting = sum(1 for t in trials if t.status in ("RUNNING", "PENDING"))  # PENDING: a worker starting
        if why := self.stall.explain(waiting, pids, warming, now):
            self.say(why)

    def _progress(self, trial, now: float) -> str:
        result = trial.last_result or {}
        label = _label(trial.config)
        tokens, speed = result.get("tokens"), result.get("tokens_per_s")
        total = planned_tokens(trial.config)
        if not tokens or not speed or not total:
            return f"{label} warming up {fmt_seconds(now - self.trial_started.get(trial.trial_id, now))}"
        eta = max(0.0, total - tokens) / speed
        unit = result.get("unit") or "tokens"  # the workload's, as the run reports it
        done = f"{tokens / 1e6:.2f}M/{total / 1e6:.2f}M {unit}"
        return f"{label} {done}, {speed:,.0f} {per_second(unit)}, ETA {fmt_seconds(eta)}"

    def finished(self, row: TrialRow, trials, trial) -> None:
        """One line for a trial the ledger has just recorded (and one more where it failed)."""
        self.done += 1
        self.new += 1
        if row.status == "error":
            self.say(f"[{self.phase}] {row.id} (Ray trial {trial.trial_id}) failed: {row.error}")
        if row.status == "ok" and row.tokens_per_s:
            self.best = max(self.best, row.tokens_per_s)
        running = sum(1 for t in trials if t.status == "RUNNING" and t is not trial)
        left = max(0, self.total - self.done - running)
        eta = self.eta_s = self._eta(time.time())
        self.unit = (trial.last_result or {}).get("unit") or self.unit  # the workload's, as its runs report
        unit = per_second(self.unit)
        speed = f" {row.tokens_per_s:,.0f} {unit}" if row.tokens_per_s else ""
        self.say(
            f"[{self.phase}] {self.done}/{self.total} done, {running} running, {left} left | "
            f"last {row.status}{speed} | best {self.best:,.0f} {unit} | ETA {fmt_seconds(eta)}"
        )

    def lost(self, trial_id: str, node: str | None) -> None:
        """The line for a trial lost with its node, which the ledger left to rerun."""
        self.say(f"[{self.phase}] Ray trial {trial_id} was lost with its node {node}: reruns")

    def _eta(self, now: float) -> float:
        """Seconds left: the pace of the trials finished so far, over those left. Runs that start together
        finish close together, so at first that pace is far too slow (a re-measure of 15 runs says 12m34s
        after its first, 65 s before its end); the phase's estimate bounds it while that has time
        left, and the time budget always."""
        eta = (now - self.started) / self.new * (self.total - self.done)
        if self.planned_s is not None and (planned_left := self.started + self.planned_s - now) > 0:
            eta = min(eta, planned_left)
        if self.budget_s is not None:
            eta = min(eta, max(0.0, self.started + self.budget_s - now))
        return eta


def trial_spec(config: dict[str, Any]) -> TrialSpec:
    """The spec a trial's Tune config carries, as the trial reads it, or as asked where it refused it."""
    try:
        return TrialSpec.of_tune(config)
    except ConfigError:
        return TrialSpec.as_asked(config)


def _label(config: dict) -> str:
    """A trial in a few words: its case number, or the knobs that say most about its speed."""
    labels = trial_spec(config).labels
    if labels.case is not None:
        return f"case {labels.case}" + (f"#{labels.repeat}" if labels.repeat else "")
    knobs = [str(config[k]) for k in ("batch_size", "precision", "compile", "kernels") if k in config]
    return "/".join(knobs) or "trial"


def planned_tokens(config: dict) -> int | None:
    """The tokens (the workload's units) a trial trains to, as the trial itself reads its config."""
    try:
        cfg = TrialSpec.of_tune(config).train
    except ConfigError:
        return None
    return cfg.total_steps * cfg.tokens_per_step
