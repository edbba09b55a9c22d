"""Where a step's time goes (issue 36 item 4): a real profile of the toy workload on the CPU, taken after the
timed window without touching what the window measured, and the profile carried through a real Tune trial into
its ledger row (the rules: tests/test_profile_rules.py; the re-measure and the reports: test_profile_report.py)."""

from __future__ import annotations

import json
import time

import pytest
import torch
from test_train import toy_config
from toy_workload import TOY, ToyWorkload

from trainables.config import ConfigError, make_config
from trainables.spec import TrialSpec
from trainables.training.loop import train
from trainables.training.profile import HOST_WRAPPERS, OpTime, Profile, summarize
from trainables.training.result import RunResult
from tuner.runs.request import Placement
from tuner.runs.tune import run_cases
from tuner.state.records import TrialRow

# --- a real profile, after the timed window -------------------------------------------------------------


class ClockedToy(ToyWorkload):
    """The toy workload, noting when each training loss (one per step here) was computed."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.calls: list[float] = []

    def loss(self, model, batch):
        if torch.is_grad_enabled():
            self.calls.append(time.time())
        return super().loss(model, batch)


def test_the_profile_runs_after_the_timed_window_and_leaves_what_it_measured_alone(tmp_path):
    plain_cfg = toy_config(eval_interval=20)
    profiled_cfg = toy_config(eval_interval=20, profile_steps=4, out_dir=str(tmp_path))
    plain = train(plain_cfg, workload=ClockedToy(plain_cfg), log=None)
    clocked = ClockedToy(profiled_cfg)
    lines: list[str] = []
    run = train(profiled_cfg, workload=clocked, log=lines.append)
    assert plain.profile is None and run.status == "ok"
    # the same run in what it trained and measured: steps, tokens, the window's tokens, every loss
    same = ("steps", "tokens", "window_tokens", "train_loss", "val_loss", "history")
    assert {k: getattr(run, k) for k in same} == {k: getattr(plain, k) for k in same}
    total = profiled_cfg.total_steps
    assert len(clocked.calls) == total + 4  # four more steps, none of them timed
    assert min(clocked.calls[total:]) >= run.window_t1, "a profiled step inside the timed window"
    found = run.profile
    assert isinstance(found, Profile) and found.steps == 4 and found.measured_on == "cpu"
    assert found.bound in ("compute", "memory", "launch") and 0 < found.busy <= 1
    assert found.top_ops[0].name.startswith("aten::"), found.top_ops
    assert not any(HOST_WRAPPERS.search(op.name) for op in found.top_ops), "a wrapper's overhead as an op"
    shares = [op.share for op in found.top_ops]
    assert shares == sorted(shares, reverse=True) and 0 < sum(shares) <= 1.0001
    assert any(
        line.startswith(f"profile (4 steps after the timed window): {found.bound}-bound") for line in lines
    )
    saved = json.loads((tmp_path / "result.json").read_text())["profile"]
    assert saved["bound"] == found.bound and saved["top_ops"][0]["name"] == found.top_ops[0].name


def test_profile_steps_is_checked_in_one_line():
    for bad in (-1, 201, "ten"):
        with pytest.raises(ConfigError, match="config key 'profile_steps'") as err:
            make_config({"profile_steps": bad})
        assert "\n" not in str(err.value)


def test_a_result_with_a_profile_becomes_a_row_with_one():
    found = summarize([OpTime("aten::mm", 3.0)], steps=2, step_ms=1.0, busy_us=1_500.0)
    metrics = RunResult(profile=found).metrics()
    assert metrics["profile"]["bound"] == "compute" and json.dumps(metrics)
    row = TrialRow(id="remeasure-0", phase="remeasure", profile=metrics["profile"])
    assert row.profile == found
    assert TrialRow.model_validate_json(row.model_dump_json()).profile == found


def test_a_tune_trial_carries_its_profile_into_its_ledger_row(tmp_path, shared_cpu_ray):
    spec = TrialSpec.of({**TOY, "profile_steps": 3})
    (row,) = run_cases("remeasure", tmp_path, [spec], Placement({"cpu": 1}, 1, reuse_actors=True))
    assert row.status == "ok" and row.steps == TOY_STEPS
    assert isinstance(row.profile, Profile) and row.profile.steps == 3 and row.profile.top_ops
    ledger = [json.loads(line) for line in (tmp_path / "trials" / "remeasure.jsonl").read_text().splitlines()]
    assert ledger[-1]["profile"]["bound"] == row.profile.bound


TOY_STEPS = make_config(TOY).total_steps


class Gate:
    """A timing gate as the loop holds it (any context manager): when it was taken and given back."""

    def __enter__(self):
        self.taken = time.time()

    def __exit__(self, *exc):
        self.freed = time.time()


def test_the_timing_gate_is_held_through_the_profile_and_only_then():
    for profile_steps in (0, 3):
        cfg = toy_config(profile_steps=profile_steps)
        clocked, gate = ClockedToy(cfg), Gate()
        run = train(cfg, workload=clocked, log=None, timing_gate=gate)
        assert gate.taken <= run.window_t0 and gate.freed >= run.window_t1
        profiled = clocked.calls[cfg.total_steps :]
        assert len(profiled) == profile_steps
        if profiled:  # no other run on this GPU is timed while this one profiles
            assert gate.freed >= profiled[-1]
