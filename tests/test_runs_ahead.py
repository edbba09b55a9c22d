"""Loss runs trained ahead through the run scheduler (tuner/runs/ahead.py:RunsAhead): started as a plan asks
while places are free, their rows asked for by request (trained ahead, or None: train it now), a failed run's
row given once, the rest stopped, a resumed search taking the rows from the ledger, and what is pending as
the ETA reads it. Real Ray tasks on a local Ray of one CPU, training the toy workload through the search's
trainable."""

from __future__ import annotations

from toy_workload import TOY

from tests.test_run_scheduler import run_scheduler
from trainables.spec import TrialSpec
from tuner.runs.ahead import RunsAhead, pending
from tuner.runs.ledger import Ledger
from tuner.runs.request import Role, RunRequest
from tuner.runs.tasks import PendingRun, TaskRun
from tuner.state.records import AHEAD_PHASE

BROKEN = {**TOY, "workload": "toy_workload:make_broken_workload"}  # fails in its first step


def ahead_request(seed: int, train: dict | None = None, role: Role = Role.AHEAD) -> RunRequest:
    """A candidate's loss run, standing for the knobs {"seed": seed} (the toy's loss key here)."""
    spec = TrialSpec.of({**(train or TOY), "seed": seed}, knobs={"seed": seed}, screen_id=f"screen-{seed}")
    return RunRequest(spec, role)


def by_seed(knobs: dict) -> int:
    return knobs["seed"]


def runs_ahead(runs, wanted: list[RunRequest], limit: int = 4, at_once: int = 1) -> RunsAhead:
    return RunsAhead(scheduler=runs, plan=lambda screen: wanted, key_of=by_seed, limit=limit, at_once=at_once)


def test_the_loss_check_gets_a_row_trained_ahead_or_none_to_train_now(tmp_path, shared_cpu_ray):
    runs = run_scheduler(tmp_path)
    ahead = runs_ahead(runs, [ahead_request(1), ahead_request(2)])
    ahead.consider([])  # one place at a time: the first wanted run starts, the second waits
    assert [(r.knobs, r.role) for r in ahead.pending()] == [({"seed": 1}, Role.AHEAD)]
    assert ahead.training() == 1
    row = ahead.loss_row(ahead_request(1, role=Role.LOSS))  # waits for it to finish
    assert (row.phase, row.screen_id, row.status, row.config) == (AHEAD_PHASE, "screen-1", "ok", {"seed": 1})
    assert row.val_loss is not None and row.train["tokens"] == TOY["tokens"], "its loss run, trained"
    assert ahead.loss_row(ahead_request(1, role=Role.LOSS)) is row, "asked again: the row as it was recorded"
    assert ahead.loss_row(ahead_request(2, role=Role.LOSS)) is None, "never started: the round trains it now"
    assert ahead.pending() == [PendingRun(Role.AHEAD, {"seed": 1}, done=True)]
    # a resumed search reads the ledger: the run counts as started and done, and its row comes back
    resumed = runs_ahead(run_scheduler(tmp_path), [])
    assert resumed.has(ahead_request(1)) and not resumed.has(ahead_request(2))
    again = resumed.loss_row(ahead_request(1, role=Role.LOSS))
    assert (again.id, again.val_loss) == (row.id, row.val_loss)
    assert resumed.pending() == [PendingRun(Role.AHEAD, {"seed": 1}, done=True)]


def test_a_failed_run_ahead_is_reported_once_then_trained_now(tmp_path, shared_cpu_ray):
    runs = run_scheduler(tmp_path)
    ahead = runs_ahead(runs, [ahead_request(5, BROKEN)])
    ahead.consider([])
    failed = ahead.loss_row(ahead_request(5, role=Role.LOSS))
    assert failed.status == "error" and failed.error, "its row, with the error, for the loss check to say"
    assert ahead.loss_row(ahead_request(5, role=Role.LOSS)) is None, "forgotten: the round trains it"
    assert not ahead.has(ahead_request(5)) and ahead.pending() == []
    assert [r.status for r in Ledger(tmp_path, AHEAD_PHASE).rows()] == ["error"]


def test_runs_no_round_asked_for_are_stopped_unrecorded(tmp_path, shared_cpu_ray):
    runs = run_scheduler(tmp_path)
    long = {**TOY, "tokens": 8 * 16 * 400_000}  # minutes of training: still going when stopped
    ahead = runs_ahead(runs, [ahead_request(7, long)], at_once=2)
    ahead.consider([])
    assert ahead.pending() == [PendingRun(Role.AHEAD, {"seed": 7}, done=False)]
    ahead.cancel_rest()
    assert ahead.training() == 0 and not Ledger(tmp_path, AHEAD_PHASE).rows()


def test_a_plan_that_fails_or_asks_for_another_role_ends_only_the_runs_ahead(tmp_path):
    runs = run_scheduler(tmp_path)

    def broken_plan(screen):
        raise KeyError("tokens_per_s")

    ahead = RunsAhead(scheduler=runs, plan=broken_plan, key_of=by_seed, limit=4, at_once=2)
    ahead.consider([])  # a listener of the screen: it must not raise into the screen
    assert ahead.limit == 0 and ahead.pending() == []
    assert runs.observed.notices == ["loss runs ahead of the loss check stopped: KeyError: 'tokens_per_s'"]
    wrong = runs_ahead(runs, [ahead_request(1, role=Role.LOSS)])
    wrong.consider([])
    assert runs.observed.notices[-1] == (
        "loss runs ahead of the loss check stopped: ValueError: a run ahead of the loss check is an ahead run, "
        "not a loss one"
    )
    assert wrong.limit == 0 and not (tmp_path / "trials").exists()


def test_what_is_pending_lists_the_baselines_runs_beside_and_the_runs_ahead(tmp_path):
    base = TrialSpec.of({**TOY, "seed": 1337})
    besides = [
        TaskRun(None, base, {}, 0.0),
        TaskRun(None, base.with_train(seed=1338), {}, 0.0),
    ]  # in the ledger
    Ledger(tmp_path, AHEAD_PHASE).append({"status": "ok", "val_loss": 2.0, "config": {"seed": 4}})
    ahead = runs_ahead(run_scheduler(tmp_path), [])  # a resumed search: its run ahead is in the ledger
    assert pending(besides, ahead).runs == (
        PendingRun(Role.BESIDE, {}, done=True),
        PendingRun(Role.BESIDE, {}, done=True),
        PendingRun(Role.AHEAD, {"seed": 4}, done=True),
    )
    assert pending(besides[:1], None).of(Role.AHEAD) == [] and pending([], None).runs == ()
