"""Running the trials of one phase as Ray Tune experiments, with a durable ledger of finished trials.

The driver appends each finished trial to OUT/trials/<phase>.jsonl the moment Ray reports it (flushed and
fsync'd). That ledger, not Ray's periodic experiment snapshot, is the record: after a crash, `--resume`
runs only what the ledger lacks, in a fresh experiment (OUT/ray/<phase>-r<k>), so no finished trial is
rerun and none is counted twice. Trials that were running when the driver died left no row: they rerun.
"""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from ray import tune
from ray.tune import Callback, Stopper

from trainables.loop import first_line
from trainables.trainable import LABELS, train_trial
from tuner.records import TrialRow

# What a row keeps of a trial's last report, besides status, speed and loss (which need care).
RESULT_KEYS = (
    "train_loss peak_mem_mb compile_s warmup_s step_ms_median step_ms_p90 steps tokens node "
    "node_id gpu pid window_t0 window_t1 window_tokens cpu_own_cores cpu_others_cores cpu_count wall_s error"
).split()


class Interrupted(KeyboardInterrupt):
    """A phase ended with trials unfinished (Ctrl-C): what finished is in the ledger; --resume goes on."""


def trial_row(
    metrics: dict[str, Any] | None, config: dict[str, Any], error: Any, path: str | None
) -> dict[str, Any]:
    """The fields of a row from what a Ray trial left: its last metrics, its config, its error (the ledger
    adds the phase and id)."""
    m = dict(metrics or {})
    status = m.get("status")
    if error is not None:
        status, m["error"] = "error", f"{type(error).__name__}: {first_line(error)[:300]}"
    elif status in (None, "running"):
        status = "stopped"  # the stopper ended it before its final report
    train = dict(config.get("train") or {})
    labels = train.pop(LABELS, None) or {}
    speed = m.get("tokens_per_s")
    return {
        "config": {k: v for k, v in config.items() if k != "train"},
        "train": train,
        "case": labels.get("case"),
        "repeat": labels.get("repeat"),
        "ray_trial_id": m.get("trial_id"),
        "status": status,
        "tokens_per_s": speed
        if isinstance(speed, int | float) and math.isfinite(speed) and speed > 0
        else None,
        "val_loss": m.get("val_loss"),
        **{k: m.get(k) for k in RESULT_KEYS},
        "path": path,
    }


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

    def append(self, fields: dict[str, Any]) -> TrialRow:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        row = TrialRow(**fields, phase=self.phase, id=f"{self.phase}-{len(self.rows())}")
        with self.path.open("a") as f:
            f.write(row.model_dump_json() + "\n")
            f.flush()
            os.fsync(f.fileno())
        return row


class Record(Callback):
    """Writes each finished trial to the ledger and prints one progress line: done/running/left, best, ETA."""

    def __init__(self, ledger: Ledger, total: int, already: int):
        self.ledger, self.total, self.done = ledger, total, already
        self.best = max((r.tokens_per_s or 0 for r in ledger.rows() if r.status == "ok"), default=0)
        self.started, self.new = time.time(), 0

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._finish(trials, trial, None)

    def on_trial_error(self, iteration, trials, trial, **info):
        error = None
        try:
            error = trial.get_pickled_error()
        except Exception:  # noqa: BLE001 - an unreadable error file still marks the trial failed
            pass
        self._finish(trials, trial, error or RuntimeError("the trial's worker failed"))

    def _finish(self, trials, trial, error):
        row = self.ledger.append(trial_row(trial.last_result, trial.config, error, trial.path))
        self.done += 1
        self.new += 1
        if row.status == "ok" and row.tokens_per_s:
            self.best = max(self.best, row.tokens_per_s)
        running = sum(1 for t in trials if t.status == "RUNNING" and t is not trial)
        left = max(0, self.total - self.done - running)
        eta = (time.time() - self.started) / self.new * (self.total - self.done)
        print(
            f"[{self.ledger.phase}] {self.done}/{self.total} done, {running} running, {left} left | "
            f"last {row.status} {row.tokens_per_s or 0:,.0f} tok/s | best {self.best:,.0f} tok/s | "
            f"ETA {eta:.0f}s",
            file=sys.stderr,
            flush=True,
        )


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


def _fit(ledger: Ledger, out: Path, param_space, resources, *, total, already, **tune_kwargs) -> None:
    """One Tune experiment; tune_kwargs go to TuneConfig (reuse_actors keeps warm workers: torch imported,
    caches loaded) except `stopper`, which goes to RunConfig."""
    storage = (out / "ray").resolve()
    attempt = sum(1 for p in storage.glob(f"{ledger.phase}*") if p.is_dir()) if storage.exists() else 0
    name = ledger.phase if attempt == 0 else f"{ledger.phase}-r{attempt}"
    stopper = tune_kwargs.pop("stopper", None)
    tuner = tune.Tuner(
        tune.with_resources(train_trial, resources),
        param_space=param_space,
        tune_config=tune.TuneConfig(
            trial_dirname_creator=lambda trial: f"{name}_{trial.trial_id}",
            **tune_kwargs,
        ),
        run_config=tune.RunConfig(
            name=name,
            storage_path=str(storage),
            stop=stopper,
            callbacks=[Record(ledger, total, already)],
            failure_config=tune.FailureConfig(max_failures=0),
            verbose=0,
        ),
    )
    tuner.fit()


def run_cases(
    phase: str,
    out: Path,
    cases: list[dict[str, Any]],
    resources: dict[str, float],
    *,
    repeats: int = 1,
    max_concurrent: int = 0,
    reuse_actors: bool = True,
) -> list[TrialRow]:
    """Each training config in `cases`, `repeats` times; rows in case order, one per (case, repeat)."""
    ledger = Ledger(out, phase)
    done = {(r.case, r.repeat) for r in ledger.rows()}
    pending = [
        {**case, LABELS: {"case": i, "repeat": rep}}
        for i, case in enumerate(cases)
        for rep in range(repeats)
        if (i, rep) not in done
    ]
    total = len(cases) * repeats
    if pending:
        if done:
            print(
                f"[{phase}] resuming: {len(done)} of {total} trials already done", file=sys.stderr, flush=True
            )
        _fit(
            ledger,
            out,
            {"train": tune.grid_search(pending)},
            resources,
            total=total,
            already=len(done),
            max_concurrent_trials=max_concurrent or None,
            reuse_actors=reuse_actors,
        )
    rows = ledger.rows()
    if len(rows) < total:  # Ray Tune returns from fit() on Ctrl-C with trials unfinished
        raise Interrupted(f"{phase}: {len(rows)} of {total} trials finished")
    return sorted(rows, key=lambda r: (r.case, r.repeat))


def run_search(
    phase: str,
    out: Path,
    param_space: dict[str, Any],
    resources: dict[str, float],
    *,
    trials: int,
    make_searcher,
    stopper_ratio: float,
    max_concurrent: int,
    time_budget_s: float | None,
    reuse_actors: bool = True,
) -> list[TrialRow]:
    """`trials` searcher-proposed trials in total, across resumes; rows in completion order."""
    ledger = Ledger(out, phase)
    done = ledger.rows()
    remaining = trials - len(done)
    started = time.time()
    if remaining > 0:
        if done:
            print(
                f"[{phase}] resuming: {len(done)} of {trials} trials already done",
                file=sys.stderr,
                flush=True,
            )
        best = max((r.tokens_per_s or 0 for r in done if r.status == "ok"), default=0.0)
        _fit(
            ledger,
            out,
            param_space,
            resources,
            total=trials,
            already=len(done),
            search_alg=make_searcher(),
            num_samples=remaining,
            max_concurrent_trials=max_concurrent or None,
            time_budget_s=time_budget_s,
            stopper=SlowTrialStopper(stopper_ratio, best),
            reuse_actors=reuse_actors,
        )
    rows = ledger.rows()
    out_of_time = time_budget_s is not None and time.time() - started >= time_budget_s * 0.95
    if len(rows) < trials and not out_of_time:  # fewer trials and no time budget spent: Ctrl-C
        raise Interrupted(f"{phase}: {len(rows)} of {trials} trials finished")
    return rows
