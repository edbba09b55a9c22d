"""The run pool (tuner/runs/pool.py): a phase hands it typed requests and gets rows back recorded, from a Tune
experiment or from a Ray task beside the screen alike: in the phase's ledger, told to the listeners, joined to
the telemetry once. Real Ray and Tune in this process, on the toy workload."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from toy_workload import TOY

from trainables.spec import TrialSpec
from tuner.context import Telemetry
from tuner.records import AHEAD_PHASE, BESIDE_PHASE
from tuner.runs.ledger import Ledger
from tuner.runs.pool import RunPool
from tuner.runs.request import Placement, Role, RunRequest, TrialInputs
from tuner.runs.tasks import start_loss_run

ONE_WORKER = Placement({"cpu": 1}, 1, reuse_actors=True)


def pool_context(out):
    """What the pool reads of a search's context: OUT, the trials' inputs, the telemetry, the notices."""
    notices: list[str] = []
    resources = SimpleNamespace(cpus_per_trial=1)
    return SimpleNamespace(
        out=out,
        inputs=TrialInputs(),
        telemetry=Telemetry(),
        notices=notices,
        notice=notices.append,
        cfg=SimpleNamespace(resources=resources),
    )


def test_a_phase_gets_its_rows_recorded_and_each_joined_once(tmp_path, one_cpu_ray):
    pool = RunPool(pool_context(tmp_path))
    requests = [RunRequest(TrialSpec.of({**TOY, "seed": 0}, finalist="f0"), Role.REMEASURE)]
    first = pool.cases("remeasure", requests, ONE_WORKER, repeats=1)
    assert [(r.phase, r.case, r.repeat, r.finalist, r.status) for r in first] == [
        ("remeasure", 0, 0, "f0", "ok")
    ]
    # asked again for more (as the re-measure times contended windows again): only the missing run trains,
    # and the row joined before comes back as it was joined, not joined twice
    again = pool.cases("remeasure", requests, ONE_WORKER, repeats=2)
    assert [(r.case, r.repeat) for r in again] == [(0, 0), (0, 1)]
    assert again[0] is first[0] and again[1].status == "ok"
    assert [r.id for r in Ledger(tmp_path, "remeasure").rows()] == [r.id for r in again]


def test_a_run_trained_as_a_task_is_recorded_in_its_roles_ledger_and_told_to_the_listeners(
    tmp_path, one_cpu_ray
):
    told: list[list] = []
    pool = RunPool(pool_context(tmp_path), listeners=[told.append])
    spec = TrialSpec.of({**TOY, "seed": 3}, knobs={"seed": 3}, screen_id="screen-2")
    run = pool.start(RunRequest(spec, Role.AHEAD), "loss-ahead-0", {"seed": 3})
    row = pool.task_row(run, "screen-2's loss run ahead")
    assert (row.phase, row.screen_id, row.config, row.status) == (AHEAD_PHASE, "screen-2", {"seed": 3}, "ok")
    assert row.val_loss is not None and row.train["seed"] == 3
    assert [r.id for r in pool.rows(Role.AHEAD)] == [row.id] and not Ledger(tmp_path, BESIDE_PHASE).rows()
    assert [[r.id for r in rows] for rows in told] == [[row.id]]
    assert pool.record(Role.AHEAD, pool.rows(Role.AHEAD))[0] is row, "recorded once, then read as it was"


def test_a_request_goes_only_to_the_backend_of_its_role(tmp_path):
    pool = RunPool(pool_context(tmp_path))
    spec = TrialSpec.of(TOY)
    with pytest.raises(ValueError, match="a beside run trains as a Ray task"):
        pool.cases("loss_check_0", [RunRequest(spec, Role.BESIDE)], ONE_WORKER)
    with pytest.raises(ValueError, match="one experiment runs one role"):
        pool.cases("p", [RunRequest(spec, Role.LOSS), RunRequest(spec, Role.SPEED)], ONE_WORKER)
    with pytest.raises(ValueError, match="a speed run is no Ray task"):
        start_loss_run(RunRequest(spec, Role.SPEED), "who", {}, 1, TrialInputs())
    assert not (tmp_path / "trials").exists()


def test_each_role_carries_its_timing_gate_policy_and_how_its_rows_are_read():
    gates = {role: RunRequest(TrialSpec.of(TOY), role).timing_gate for role in Role}
    assert gates == {
        Role.PROBE: None,
        Role.SPEED: "turns",
        Role.BESIDE: "beside",
        Role.AHEAD: "beside",
        Role.LOSS: None,
        Role.REMEASURE: "quiet",
    }
    assert {r for r in Role if r.timed} == {Role.SPEED, Role.REMEASURE}
    assert {r for r in Role if r.during_screen} == {Role.SPEED, Role.BESIDE, Role.AHEAD}
