"""Loss runs trained ahead, beside the screen. As the screen's trials finish, the loss check's plan names the
loss runs it would train if the screen ended then, most wanted first; those with a place free start at once,
each as a Ray task on its share of a GPU (one screen run's place), yielding the GPU to every timed window
(as the baseline's does: tuner/measure/baseline.py:start_beside). A loss-check round then asks for a run's row by its
request: the row of the run trained ahead for the request's key (waited for while it still trains), or None,
and the round trains it now. Runs no round asked for are stopped before the re-measure, which needs quiet
GPUs. Their rows are kept in OUT/trials/loss_check_ahead.jsonl, so a resumed search takes them as they were.

Without them, four H100s spent 98 s in two loss-check rounds after a screen that left its GPUs 75-91% idle
(docs/benchmarks.md): that idle time is what these runs use."""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainables.common.progress import log
from tuner.runs.request import Role, RunRequest
from tuner.runs.scheduler import RunScheduler
from tuner.runs.tasks import LossSeen, Pending, PendingRun, TaskRun
from tuner.state.records import TrialRow

CANCEL_WAIT_S = 10.0  # how long cancel_rest waits for its stopped runs' processes to end

# The screen's rows so far -> the loss runs the loss check wants trained ahead (Role.AHEAD: each on its GPU
# share beside the screen), most wanted first.
Plan = Callable[[list[TrialRow]], list[RunRequest]]
# The knobs a run stands for -> its key: runs of one key stand for each other (the loss check's loss key).
KeyOf = Callable[[dict[str, Any]], Hashable]


@dataclass
class _Ahead:
    knobs: dict[str, Any]  # the knobs its run stands for
    task: TaskRun | None = None  # None: its row is in the ledger (from before a resume, or taken)


@dataclass(kw_only=True)
class RunsAhead:
    """The loss runs trained ahead of the loss check: at most `limit` in all (the loss check's run budget),
    `at_once` training at a time (one per GPU). `plan` says which runs are wanted as the screen goes on;
    `key_of` which of them stand for each other (one run for each key)."""

    scheduler: RunScheduler
    plan: Plan
    key_of: KeyOf
    limit: int
    at_once: int
    runs: dict[Hashable, _Ahead] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for row in self.scheduler.rows(Role.AHEAD):  # from before a resume
            self.runs[self.key_of(row.config)] = _Ahead(row.config)

    def consider(self, screen: list[TrialRow]) -> None:
        """Starts the runs the plan wants for the screen's rows so far that have none, while places are free
        (a listener of the screen's ledger). An error here ends only the runs ahead (the rounds train the
        rest), not the screen it was called from."""
        try:
            for request in self.plan(screen):
                if self.has(request) or len(self.runs) >= self.limit or self.training() >= self.at_once:
                    continue
                self._start(request)
        except Exception as err:  # noqa: BLE001 - reported, and the loss check trains what is left
            self.limit = len(self.runs)
            self.scheduler.notice(f"loss runs ahead of the loss check stopped: {type(err).__name__}: {err}")

    def has(self, request: RunRequest) -> bool:
        """Whether a run of the request's key was started ahead (or found in the ledger)."""
        return self._key(request) in self.runs

    def training(self) -> int:
        """How many of its runs are still training."""
        return sum(1 for run in self.runs.values() if run.task is not None and not run.task.done())

    def loss_row(self, request: RunRequest) -> TrialRow | None:
        """The row of the run trained ahead for the request's key, recorded (waiting for it while it
        trains); None: none was, and the loss check trains it now. A failed run's row is given once, with
        its error, and then forgotten: asked again, None. A run started for a twin that the screen later
        outran stands for the request: the same loss."""
        key = self._key(request)
        run = self.runs.get(key)
        if run is None:
            return None
        if run.task is not None:
            row = self.scheduler.task_row(run.task, f"{request.spec.labels.screen_id}'s loss run ahead")
            run.task = None
        else:  # recorded before a resume, or asked for again
            kept = [r for r in self.scheduler.rows(Role.AHEAD) if self.key_of(r.config) == key][-1]
            row = self.scheduler.record(Role.AHEAD, [kept])[0]
        if row.status != "ok":
            del self.runs[key]
        return row

    def cancel_rest(self) -> None:
        """Ends the runs no round asked for (their configs were outrun later): the re-measure needs quiet
        GPUs."""
        left = [run.task for run in self.runs.values() if run.task is not None]
        for task in left:
            task.cancel()
        deadline = time.monotonic() + CANCEL_WAIT_S
        for task in left:  # Ray ends a cancelled task asynchronously: the GPU is quiet once they have ended
            task.wait(max(0.0, deadline - time.monotonic()))
        if left:
            log(f"[loss_check] {len(left)} loss run(s) ahead no round needed: stopped")

    def finished(self) -> list[LossSeen]:
        """What its runs that have ended say of their configs' loss: those recorded (before a resume, or taken
        by a round) and those finished since, not yet taken."""
        kept = [LossSeen.of_row(row) for row in self.scheduler.rows(Role.AHEAD)]
        fresh = [LossSeen.of(run.task) for run in self.runs.values() if run.task is not None]
        return kept + [seen for seen in fresh if seen is not None]

    def pending(self) -> list[PendingRun]:
        """Its runs as the ETA reads them: each key's, done or still training."""
        return [
            run.task.pending() if run.task is not None else PendingRun(Role.AHEAD, run.knobs, done=True)
            for run in self.runs.values()
        ]

    def _start(self, request: RunRequest) -> None:
        if request.role is not Role.AHEAD:
            raise ValueError(
                f"a run ahead of the loss check is an {Role.AHEAD.value} run, not a {request.role.value} one"
            )
        knobs = request.spec.labels.knobs
        who = f"loss-ahead-{len(self.runs)}"  # its name at its GPU's timing gate
        self.runs[self._key(request)] = _Ahead(knobs, self.scheduler.start(request, who, knobs))
        what = request.spec.labels.screen_id
        log(f"[loss_check] {what}'s loss run trains ahead, beside the screen, in its GPU's idle time")

    def _key(self, request: RunRequest) -> Hashable:
        return self.key_of(request.spec.labels.knobs)


def pending(besides: Sequence[TaskRun], ahead: RunsAhead | None) -> Pending:
    """What the runs beside the screen stand at as it ends: the baseline's (`besides`: its seeds') and the
    candidates' ahead of the loss check (the ETA counts only the loss runs none of them trains)."""
    return Pending((*(run.pending() for run in besides), *(ahead.pending() if ahead is not None else ())))
