"""Runs started as Ray tasks rather than in a Tune experiment: a loss run trained beside the screen (the
baseline's, or a candidate's ahead of the loss check), the batch probe, the hardware check. Here alone the
tuner's phases reach Ray for them: a `TaskRun` says whether it is done, waits for it, and cancels it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ray

from trainables.data import Corpus
from trainables.spec import TrialSpec
from trainables.trainable import run_beside
from tuner.runs.request import Role, RunRequest, TrialInputs
from tuner.space.batch_finder import max_batch
from tuner.state.hardware import ProbedBatch
from tuner.state.records import TrialRow


@dataclass
class TaskRun:
    """A loss run trained as a Ray task: its task (None when its row is already in the ledger, from before
    a resume), the trial it runs, the config it took the execution of (the baseline's: a start point), and
    its role (Role.BESIDE or Role.AHEAD: which ledger its row goes to, tuner/runs/scheduler.py)."""

    ref: Any
    spec: TrialSpec
    point: dict[str, Any]
    started: float
    role: Role = Role.BESIDE

    def done(self) -> bool:
        return self.ref is None or bool(ray.wait([self.ref], timeout=0)[0])

    def wait(self, timeout_s: float) -> None:
        if self.ref is not None:
            ray.wait([self.ref], timeout=timeout_s)

    def result(self) -> tuple[dict[str, Any] | None, BaseException | None]:
        """Its metrics, or its error (a failed run is a row with its error, as a trial's is)."""
        try:
            return ray.get(self.ref), None
        except Exception as err:  # noqa: BLE001
            return None, err

    def finished(self) -> tuple[dict[str, Any] | None, BaseException | None] | None:
        """Its metrics or its error once it has ended (None: still training, or its row was in the ledger
        before a resume); a look that leaves the run for the scheduler to record."""
        if self.ref is None or not self.done():
            return None
        return self.result()

    def cancel(self) -> None:
        if self.ref is not None:
            ray.cancel(self.ref, force=True)

    def pending(self) -> PendingRun:
        return PendingRun(self.role, self.spec.labels.knobs, self.done())


@dataclass(frozen=True)
class LossSeen:
    """What a finished loss run says of the loss of the config it stands for (a tuner.rules LossRun)."""

    knobs: dict[str, Any]
    status: str
    val_loss: float | None
    seed: int | None = None

    @classmethod
    def of(cls, run: TaskRun) -> LossSeen | None:
        """A task's, once it has ended (None: still training, or its row was in the ledger before)."""
        ended = run.finished()
        if ended is None:
            return None
        metrics, _ = ended
        status, loss = (
            (metrics.get("status", "error"), metrics.get("val_loss")) if metrics else ("error", None)
        )
        return cls(run.spec.labels.knobs, status, loss, run.spec.train.seed)

    @classmethod
    def of_row(cls, row: TrialRow) -> LossSeen:
        return cls(row.config, row.status, row.val_loss, row.train.get("seed"))


@dataclass(frozen=True)
class PendingRun:
    """A loss run trained as a Ray task, as the ETA reads it: its role, the knobs it stands for (a
    candidate's: its config's; the baseline's: none), and whether it has ended (one whose row was in the
    ledger before a resume has)."""

    role: Role
    knobs: dict[str, Any]
    done: bool


@dataclass(frozen=True)
class Pending:
    """The runs trained beside the screen as the screen ends, done or still training: what the loss check
    will take the rows of rather than train (tuner/runs/ahead.py:pending)."""

    runs: tuple[PendingRun, ...] = ()

    def of(self, role: Role) -> list[PendingRun]:
        return [run for run in self.runs if run.role == role]


def start_loss_run(
    request: RunRequest, who: str, point: dict[str, Any], cpus: float, inputs: TrialInputs
) -> TaskRun:
    """The request's spec as a Ray task on its GPU share (its placement's), `who` at its GPU's gate
    (a run beside the screen yields the GPU to every timed window: the only gate policy a task knows)."""
    if request.timing_gate != "beside":
        raise ValueError(f"a {request.role.value} run is no Ray task: only runs beside the screen are")
    spec = request.spec
    # max_calls=1: the worker exits with the run; kept idle, its CUDA context on the GPU made every later
    # window there "GPU shared" (on 2 H200s: 13 re-measure windows timed again, 277 s instead of ~80)
    task = ray.remote(max_calls=1)(run_beside).options(num_cpus=cpus, num_gpus=spec.placement.gpu_share)
    ref = task.remote(spec, who, inputs.corpus, inputs.cache_server)
    return TaskRun(ref, spec, point, time.time(), request.role)


def probe_batches(
    base: dict[str, Any], precisions: list[str], limit: int, corpus: Corpus | None, on_gpu: bool
) -> dict[str, ProbedBatch]:
    """The largest batch per precision, one fresh worker each (an OOM must leave nothing behind for the
    next), one after the other on a GPU of its own; the corpus is put in Ray's object store once."""
    task = ray.remote(max_calls=1)(max_batch).options(num_gpus=1 if on_gpu else 0, num_cpus=1)
    shipped = ray.put(corpus)
    return dict(zip(precisions, ray.get([task.remote(base, p, limit, corpus=shipped) for p in precisions])))


def on_a_trial_node(probe: Callable[[], dict[str, Any]], gpu: bool) -> dict[str, Any]:
    """`probe()` run where the trials run (on a GPU node when the cluster has GPUs): what it finds there."""
    return ray.get(ray.remote(probe).options(**({"num_gpus": 1} if gpu else {})).remote())
