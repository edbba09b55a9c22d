"""The run scheduler: the one owner of the search's training runs (docs/run-owner-plan.md, step 1). The
pipeline makes one and every phase's inputs carry it: a phase hands it `RunRequest`s and gets their rows back,
recorded. Two backends run them today: a Tune experiment for a fixed list or a searcher's proposals
(tuner/runs/tune.py), and a Ray task for a loss run beside the screen (tuner/runs/tasks.py). Every finished
run, from either, is recorded the same way:

    its row -> its ledger (OUT/trials/<ledger>.jsonl, the moment it ends: a crashed driver's --resume reads
               it) -> that ledger's listeners (told its rows so far, as each is added)
            -> `RunScheduler.record` (once the rows are in): the telemetry join (tuner/runs/observe.py), read
               by role

The join waits for the rows of one call because it needs them together: the processes of the runs that took
turns at a GPU's timing gate are no contention of each other's window, and a notice counts a call's
contended or cold-compiled runs once. Joins are kept per (ledger, id) in one map, so each row is joined once
(a phase that asks again, as the re-measure does for its contended windows, gets the rows already joined as
they were), and a row's siblings are the rows of its call not joined before: one phase's rows, as when each
phase had a pool of its own (a ledger is one phase's, and no row was ever joined by two pools).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from trainables.common.progress import log
from tuner.runs.ledger import Ledger
from tuner.runs.observe import Observed, annotate
from tuner.runs.request import Placement, Role, RunRequest, TpeSearch, TrialInputs, spec_key
from tuner.runs.screen_clock import ScreenClock
from tuner.runs.tasks import TaskRun, start_loss_run
from tuner.runs.tune import run_cases, run_proposals, tpe_searcher
from tuner.space.batch_fit import BatchFit
from tuner.state.records import AHEAD_PHASE, BESIDE_PHASE, TrialRow
from tuner.state.trial_rows import trial_row

TASK_LEDGERS = {Role.BESIDE: BESIDE_PHASE, Role.AHEAD: AHEAD_PHASE}  # the ledgers of runs trained as tasks
WAIT_LINE_S = 30.0  # the longest the search is silent while it waits for a run beside the screen

Listener = Callable[[list[TrialRow]], None]


@dataclass(kw_only=True)
class RunScheduler:
    """The search's way to run training runs, one for all its phases: `cases` (a fixed list), `proposals`
    (a searcher's), `start` and `task_row` (a loss run beside the screen); each gives rows recorded in their
    ledger and joined to the telemetry. It reads OUT, what every trial gets through Ray, the CPUs a task run
    takes, and the telemetry join's samplers and notices (`observed`: the search's context)."""

    out: Path
    inputs: TrialInputs
    cpus_per_trial: float
    observed: Observed
    listeners: dict[str, list[Listener]] = field(default_factory=dict)  # ledger -> told its rows so far
    joined: dict[tuple[str, str], TrialRow] = field(default_factory=dict)  # (ledger, id) -> its joined row

    def listen(self, ledger: str, listener: Listener) -> None:
        """`listener` is told the ledger's rows so far as each run of `proposals` or `task_row` is added to
        it (a searcher's also every RETELL_S; `cases` tells no one): the runs ahead listen to the screen's."""
        self.listeners.setdefault(ledger, []).append(listener)

    def notice(self, msg: str) -> None:
        self.observed.notice(msg)

    def cases(
        self,
        ledger: str,
        requests: Sequence[RunRequest],
        placement: Placement,
        *,
        repeats: int | Sequence[int] = 1,
        planned_s: float | None = None,
    ) -> list[TrialRow]:
        """Each request's run `repeats` times (tune.run_cases: round robin, resumed from the ledger)."""
        role = _one_role(requests)
        rows = run_cases(
            ledger,
            self.out,
            [r.spec for r in requests],
            placement,
            repeats=repeats,
            inputs=self.inputs,
            planned_s=planned_s,
            role=role,
        )
        return self.record(role, rows)

    def proposals(
        self,
        ledger: str,
        request: RunRequest,
        placement: Placement,
        *,
        trials: int,
        searcher: TpeSearch,
        stopper_ratio: float,
        clock: ScreenClock | None,
        fit: BatchFit | None = None,
    ) -> list[TrialRow]:
        """Up to `trials` runs of the request's spec with the knobs `searcher` proposes from its space over it
        (tune.run_proposals; `fit`: the batch rules its proposals obey); the ledger's listeners hear of each
        as it finishes."""
        _one_role([request])
        rows = run_proposals(
            ledger,
            self.out,
            request.spec.as_tune(),
            placement,
            trials=trials,
            make_searcher=lambda: tpe_searcher(searcher),
            stopper_ratio=stopper_ratio,
            clock=clock,
            inputs=self.inputs,
            on_row=self._told(ledger),
            role=request.role,
            fit=fit,
            keep=searcher.points,  # the start points run to the end: the stopper never cuts them short
        )
        return self.record(request.role, rows)

    def start(self, request: RunRequest, who: str, point: dict[str, Any]) -> TaskRun:
        """A loss run beside the screen, as a Ray task on its GPU share, `who` at its GPU's gate; `point`: the
        config whose execution it took."""
        return start_loss_run(request, who, point, self.cpus_per_trial, self.inputs)

    def rows(self, role: Role) -> list[TrialRow]:
        """The ledgered rows of the runs of `role` trained as tasks (from before a resume, too), not joined."""
        return Ledger(self.out, TASK_LEDGERS[role]).rows()

    def task_row(self, run: TaskRun, what: str) -> TrialRow:
        """The task run's row, once it has finished (a line every WAIT_LINE_S while it trains on), recorded:
        its role's ledger, that ledger's listeners, the telemetry join. A failed run is a row with its
        error."""
        while not run.done():
            log(f"[loss_check] {what} is still training ({time.time() - run.started:.0f} s so far)")
            run.wait(WAIT_LINE_S)
        metrics, error = run.result()
        ledger = Ledger(self.out, TASK_LEDGERS[run.role])
        row = ledger.append(
            {**trial_row(metrics, run.spec, error, None), "spec_key": spec_key(run.spec, run.role)}
        )
        self._tell(ledger.phase, ledger.rows())
        return self.record(run.role, [row])[0]

    def record(self, role: Role, rows: list[TrialRow]) -> list[TrialRow]:
        """Rows already in their ledger, joined to the telemetry (each row once), read as `role`; the rows of
        one call not joined before are each other's siblings at the join."""
        new = [r for r in rows if (r.phase, r.id) not in self.joined]
        self.joined.update(((r.phase, r.id), r) for r in annotate(self.observed, new, role))
        return [self.joined[(r.phase, r.id)] for r in rows]

    def _told(self, ledger: str) -> Listener | None:
        """What a Tune experiment on `ledger` tells of its rows (None: no one listens, so no retelling)."""
        return partial(self._tell, ledger) if self.listeners.get(ledger) else None

    def _tell(self, ledger: str, rows: list[TrialRow]) -> None:
        for listener in self.listeners.get(ledger, []):
            listener(rows)


def _one_role(requests: Sequence[RunRequest]) -> Role:
    """The role the requests of one experiment share (one gate policy per experiment); a task's role is
    refused: those runs are `start`ed."""
    roles = {r.role for r in requests}
    if len(roles) != 1:
        raise ValueError(f"one experiment runs one role, not {sorted(r.value for r in roles) or 'none'}")
    (role,) = roles
    if role in TASK_LEDGERS:
        raise ValueError(f"a {role.value} run trains as a Ray task: RunScheduler.start, not an experiment")
    return role
