"""The run scheduler (tuner/runs/scheduler.py): a phase hands it typed requests and gets rows back recorded,
from a Tune experiment or from a Ray task beside the screen alike: in the phase's ledger, told to that
ledger's listeners, joined to the telemetry once. Real Ray and Tune in this process, on the toy workload."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from toy_workload import TOY

from trainables.spec import TrialSpec
from tuner.runs.ledger import Ledger
from tuner.runs.observe import Telemetry
from tuner.runs.phase_progress import trial_spec
from tuner.runs.request import Placement, Role, RunRequest, TpeSearch, TrialInputs, spec_key
from tuner.runs.scheduler import RunScheduler
from tuner.runs.tasks import start_loss_run
from tuner.runs.tune import tpe_searcher
from tuner.space.sampler import replayed
from tuner.state.records import AHEAD_PHASE, BESIDE_PHASE

ONE_WORKER = Placement({"cpu": 1}, 1, reuse_actors=True)


def run_scheduler(out) -> RunScheduler:
    """A scheduler as the pipeline makes one, on OUT: no telemetry, its notices kept (`observed.notices`)."""
    notices: list[str] = []
    observed = SimpleNamespace(telemetry=Telemetry(), notices=notices, notice=notices.append)
    return RunScheduler(out=out, inputs=TrialInputs(), cpus_per_trial=1, observed=observed)


def test_a_phase_gets_its_rows_recorded_and_each_joined_once(tmp_path, shared_cpu_ray):
    runs = run_scheduler(tmp_path)
    requests = [RunRequest(TrialSpec.of({**TOY, "seed": 0}, finalist="f0"), Role.REMEASURE)]
    first = runs.cases("remeasure", requests, ONE_WORKER, repeats=1)
    assert [(r.phase, r.case, r.repeat, r.finalist, r.status) for r in first] == [
        ("remeasure", 0, 0, "f0", "ok")
    ]
    # asked again for more (as the re-measure times contended windows again): only the missing run trains,
    # and the row joined before comes back as it was joined, not joined twice
    again = runs.cases("remeasure", requests, ONE_WORKER, repeats=2)
    assert [(r.case, r.repeat) for r in again] == [(0, 0), (0, 1)]
    assert again[0] is first[0] and again[1].status == "ok"
    assert [r.id for r in Ledger(tmp_path, "remeasure").rows()] == [r.id for r in again]


def test_a_run_trained_as_a_task_is_recorded_in_its_roles_ledger_and_told_to_that_ledgers_listeners(
    tmp_path, shared_cpu_ray
):
    told: list[list] = []
    screen_told: list[list] = []  # as the runs ahead listen: to the screen's rows alone
    runs = run_scheduler(tmp_path)
    runs.listen(AHEAD_PHASE, told.append)
    runs.listen("screen", screen_told.append)
    spec = TrialSpec.of({**TOY, "seed": 3}, knobs={"seed": 3}, screen_id="screen-2")
    run = runs.start(RunRequest(spec, Role.AHEAD), "loss-ahead-0", {"seed": 3})
    row = runs.task_row(run, "screen-2's loss run ahead")
    assert (row.phase, row.screen_id, row.config, row.status) == (AHEAD_PHASE, "screen-2", {"seed": 3}, "ok")
    assert row.val_loss is not None and row.train["seed"] == 3
    assert row.spec_key == RunRequest(spec, Role.AHEAD).key  # the same identity as a Tune run's row
    assert [r.id for r in runs.rows(Role.AHEAD)] == [row.id] and not Ledger(tmp_path, BESIDE_PHASE).rows()
    assert [[r.id for r in rows] for rows in told] == [[row.id]]
    assert screen_told == [], "a listener hears of its own ledger's rows only"
    assert runs.record(Role.AHEAD, runs.rows(Role.AHEAD))[0] is row, "recorded once, then read as it was"


def test_a_searchers_proposals_come_from_the_tpe_search_its_phase_planned(tmp_path, shared_cpu_ray):
    # The phase plans the searcher (a TpeSearch: study, seed, startup trials, space, start points) and the
    # scheduler builds the loss-aware TPE from it: the start point first, then the seeded TPE's draws, each
    # one in the study with what it was drawn from, so a fresh draw from that proposes it again.
    storage = JournalStorage(JournalFileBackend(str(tmp_path / "optuna.journal")))
    space = {"seed": list(range(100))}
    searcher = TpeSearch(
        study="screen", storage=storage, seed=5, startup_trials=3, space=space, points=({"seed": 3},)
    )
    runs, told = run_scheduler(tmp_path), []
    runs.listen("screen", told.append)
    rows = runs.proposals(
        "screen",
        RunRequest(TrialSpec.of(TOY), Role.SPEED),
        ONE_WORKER,
        trials=3,
        searcher=searcher,
        stopper_ratio=0.0,
        clock=None,
    )
    sampler = tpe_searcher(searcher)
    proposed = [t.params["seed"] for t in sampler.study.trials]
    assert len(proposed) == 3 and proposed[0] == 3, "the start point first"
    assert replayed(sampler) == [True, True, True], "each, the seeded TPE's draw from what it saw"
    assert sorted(r.config["seed"] for r in rows) == sorted(proposed)
    assert [r.id for r in told[-1]] == sorted(r.id for r in rows), "its ledger's listener told each row"


def test_a_request_goes_only_to_the_backend_of_its_role(tmp_path):
    runs = run_scheduler(tmp_path)
    spec = TrialSpec.of(TOY)
    with pytest.raises(ValueError, match="a beside run trains as a Ray task"):
        runs.cases("loss_check_0", [RunRequest(spec, Role.BESIDE)], ONE_WORKER)
    with pytest.raises(ValueError, match="one experiment runs one role"):
        runs.cases("p", [RunRequest(spec, Role.LOSS), RunRequest(spec, Role.SPEED)], ONE_WORKER)
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


# --- resume by the spec's identity ------------------------------------------------------------------------


def test_a_spec_key_is_the_runs_identity_not_where_it_is_placed():
    spec = TrialSpec.of({**TOY, "seed": 3}, knobs={"seed": 3}, screen_id="screen-2").labelled(
        case=1, repeat=0
    )
    key = spec_key(spec, Role.LOSS)
    assert key == spec_key(trial_spec(spec.as_tune()), Role.LOSS), (
        "the trial's own reading of its Tune config"
    )
    placed = spec.with_placement(gpu_share=0.25).with_train(cpu_threads=2)
    assert key == spec_key(placed, Role.LOSS) == spec_key(trial_spec(placed.as_tune()), Role.LOSS)
    assert key == spec_key(spec.with_train(gpu_memory_fraction=0.25), Role.LOSS), (
        "a run whose share was its training config's (a ledger from before TrialPlacement) is the same run"
    )
    others = [
        spec_key(spec, Role.REMEASURE),
        spec_key(spec.with_train(lr=1e-3), Role.LOSS),
        spec_key(spec.labelled(repeat=1), Role.LOSS),
        spec_key(spec.labelled(screen_id="screen-3"), Role.LOSS),
    ]
    assert len({key, *others}) == 5 and all(len(k) == 16 for k in others)
    # a config the trial refused is recorded as asked, with a key: its row is never lost to the key
    refused = TrialSpec.as_asked({"train": {**TOY, "batch_size": "huge", "nope": 1}})
    assert len(spec_key(refused, Role.SPEED)) == 16


def test_a_resumed_phase_skips_exactly_the_runs_whose_spec_key_is_in_its_ledger(tmp_path, shared_cpu_ray):
    def requests(second_seed: int) -> list[RunRequest]:
        return [RunRequest(TrialSpec.of({**TOY, "seed": s}), Role.LOSS) for s in (0, second_seed)]

    first = run_scheduler(tmp_path).cases("loss_check_0", requests(1), ONE_WORKER)
    assert [r.spec_key for r in first] == [
        RunRequest(r.spec.labelled(case=i, repeat=0), r.role).key for i, r in enumerate(requests(1))
    ]
    # resumed with case 1 now another config: its row at (1, 0) is not this run's, so only it trains
    resumed = run_scheduler(tmp_path).cases("loss_check_0", requests(2), ONE_WORKER)
    assert resumed[0].id == first[0].id and resumed[1].id not in {r.id for r in first}
    assert [r.train["seed"] for r in resumed] == [0, 2] and all(r.status == "ok" for r in resumed)
    assert len(Ledger(tmp_path, "loss_check_0").rows()) == 3
    # and asked again as it was first: both its runs are in the ledger, nothing trains
    again = run_scheduler(tmp_path).cases("loss_check_0", requests(1), ONE_WORKER)
    assert [r.id for r in again] == [r.id for r in first]
    assert len(Ledger(tmp_path, "loss_check_0").rows()) == 3
    assert sorted(p.name for p in (tmp_path / "ray").iterdir()) == ["loss_check_0", "loss_check_0-r1"]


def test_a_ledger_from_before_spec_keys_is_resumed_by_case_and_repeat(tmp_path, shared_cpu_ray):
    # a finished run's row as a search wrote it before rows had a spec key: its place (case 0, repeat 0), no
    # key (written here, not trained: nothing of a run but its row is read)
    ledger = Ledger(tmp_path, "loss_check_0")
    trained = {"status": "ok", "case": 0, "repeat": 0, "config": {"seed": 0}, "train": {**TOY, "seed": 0}}
    ledger.path.parent.mkdir(parents=True, exist_ok=True)
    ledger.path.write_text(json.dumps({"id": "loss_check_0-0", "phase": "loss_check_0", **trained}) + "\n")
    (first,) = ledger.rows()
    assert first.spec_key is None
    # its row at (0, 0) stands for case 0 whatever its config, as before: nothing trains
    other = [RunRequest(TrialSpec.of({**TOY, "seed": 5}), Role.LOSS)]
    (row,) = run_scheduler(tmp_path).cases("loss_check_0", other, ONE_WORKER)
    assert row.id == first.id and row.spec_key is None and len(ledger.rows()) == 1
    assert not (tmp_path / "ray").exists(), "a run trained"
