"""The one table of run shapes (tuner/runs/shapes.py): every role has a shape, and each kind is what its
phase needs: timed runs short and equal, loss runs at the loss horizon, the probe two steps."""

from __future__ import annotations

import pytest

from tuner.config import load_search_config
from tuner.rules.horizon import horizon_for
from tuner.runs.request import Role
from tuner.runs.shapes import RunShapes
from tuner.space.batch_fit import probe_case

SMOKE = "configs/smoke.yaml"


def shapes(*overrides: str) -> RunShapes:
    cfg = load_search_config(SMOKE, list(overrides))
    horizon = horizon_for(cfg.train, cfg.search.space, cfg.quality.loss_horizon)
    return RunShapes(cfg.train, cfg.search.screen_steps, horizon)


@pytest.mark.parametrize("role", list(Role))
def test_every_role_has_a_shape_that_writes_no_files_and_keeps_the_knobs(role):
    case = shapes().case(role, {"batch_size": 16, "precision": "fp32"})
    assert case["out_dir"] is None and case["batch_size"] == 16 and case["precision"] == "fp32"


def test_timed_runs_are_the_warm_up_and_the_screens_steps_whatever_the_knobs():
    s = shapes()
    speed, again = s.case(Role.SPEED, {"batch_size": 64}), s.case(Role.REMEASURE, {"batch_size": 64})
    assert speed == again and speed["max_steps"] == s.base.timing_warmup_steps + s.screen_steps
    assert (
        speed["eval_interval"] == 0 and speed["eval_tokens"] == s.base.example_units * s.base.eval_batch_size
    )


def test_loss_runs_train_the_planned_run_or_the_horizons_prefix_of_it():
    full = shapes().case(Role.LOSS, {"batch_size": 16})
    assert full["max_steps"] == shapes().base.max_steps and full["tokens"] == shapes().base.tokens
    prefix = shapes("quality.loss_horizon=8192", "train.tokens=65536")
    cut = prefix.case(Role.LOSS, {"batch_size": 16})
    assert cut["max_steps"] == 8192 // (16 * cut["seq_len"])  # the prefix's tokens at this run's batch
    assert prefix.case(Role.BESIDE) == prefix.case(Role.LOSS) == prefix.case(Role.AHEAD)


def test_the_probe_trains_two_steps_of_the_whole_batch_in_one_forward():
    case = probe_case({"batch_size": 8, "micro_batch": 4, "seq_len": 32}, 128, "bf16")
    assert (case["batch_size"], case["micro_batch"], case["precision"], case["max_steps"]) == (
        128,
        None,
        "bf16",
        2,
    )
