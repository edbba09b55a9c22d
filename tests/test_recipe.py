"""The usual hand recipe (tuner/space/recipe.py): always a start point of the screen, trimmed to what the hardware
runs, recorded in summary.json and said in the report beside the answer."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import make_row, make_summary
from pydantic import ValidationError

from trainables.config import TrainConfig
from tuner.config import RECIPE, SearchConfig, SearchSection, load_search_config
from tuner.context import SearchContext
from tuner.decide.loss_plan import Limits, LossPlan
from tuner.phases.remeasure import _recipe_finalist
from tuner.pipeline import remeasure_inputs, run_scheduler
from tuner.report.recipe_section import recipe_line
from tuner.runs.tune import SlowTrialStopper
from tuner.space.domains import applicable
from tuner.space.recipe import (
    SCREEN_MARGIN,
    as_run_here,
    in_reach,
    in_space,
    recipe_point,
    result,
    row_ids,
    start_points,
)
from tuner.state.hardware import Hardware
from tuner.state.search_state import State

ROOT = Path(__file__).resolve().parents[1]
BASE = TrainConfig(batch_size=64, precision="fp32", compile="none", fused_adamw=False)
GPU = {"cuda": True, "bf16": True, "gpus": 1}
CPU = {"cuda": False, "bf16": False, "gpus": 0}


def test_the_recipe_is_bf16_compile_and_fused_adamw_at_the_baselines_batch_and_lr():
    assert RECIPE == {"precision": "bf16", "compile": "default", "fused_adamw": True}
    assert SearchSection().recipe == RECIPE  # on by default
    assert set(RECIPE).isdisjoint({"batch_size", "lr", "lr_scaling", "tokens"})


def test_the_recipes_knobs_join_a_space_that_lacks_them():
    space = {"batch_size": [32, 64, 128], "precision": ["fp32", "fp16"]}
    offered = in_space(space, RECIPE, BASE, cuda=True)
    assert offered["precision"] == ["fp32", "fp16", "bf16"]  # a choice added to a list
    assert offered["compile"] == ["none", "default"]  # a knob added: the baseline's value or the recipe's
    assert offered["fused_adamw"] == [False, True]
    assert offered["batch_size"] == [32, 64, 128]
    assert space == {"batch_size": [32, 64, 128], "precision": ["fp32", "fp16"]}  # the config's own untouched


def test_without_cuda_the_recipe_leaves_compile_out_and_the_hardware_drops_bf16():
    offered = in_space({"batch_size": [64]}, RECIPE, BASE, cuda=False)
    assert "compile" not in offered
    space, fixed, _ = applicable(offered, CPU)
    assert recipe_point(space, RECIPE) == {"fused_adamw": True}  # bf16 is emulated without native support
    assert "precision" not in space and fixed.get("precision") == "fp32"


def test_as_run_here_is_the_whole_recipe_on_a_gpu():
    cfg = SearchConfig.model_validate(
        {"train": {"batch_size": 64}, "search": {"space": {"batch_size": [64, 128]}}}
    )
    assert as_run_here(cfg.search, cfg.train, GPU) == RECIPE
    off = cfg.search.model_copy(update={"recipe": None})
    assert as_run_here(off, cfg.train, GPU) == {}


def test_start_points_are_the_baseline_the_recipe_then_the_users_each_once():
    space = in_space({"batch_size": [64, 128], "precision": ["fp32", "bf16"]}, RECIPE, BASE, cuda=True)
    mine = [
        {"batch_size": 128, "precision": "bf16"},
        {"precision": "bf16", "compile": "default", "fused_adamw": True},
    ]
    points = start_points(mine, RECIPE, space, BASE, lambda line: None)
    baseline = {"batch_size": 64, "precision": "fp32", "compile": "none", "fused_adamw": False}
    recipe = {"batch_size": 64, "precision": "bf16", "compile": "default", "fused_adamw": True}
    assert points == [baseline, recipe, {**baseline, "batch_size": 128, "precision": "bf16"}]


def test_no_baseline_point_where_the_space_lacks_the_baselines_value():
    space = {"batch_size": [128, 256], "precision": ["fp32", "bf16"]}
    points = start_points([], RECIPE, space, BASE, lambda line: None)
    assert points == [{"batch_size": 128, "precision": "bf16"}]  # the recipe, at the space's first batch


def test_a_recipe_knob_that_is_not_a_train_key_is_one_line():
    with pytest.raises(ValidationError, match="unknown knob 'speed'"):
        SearchSection(recipe={"speed": "max"})
    with pytest.raises(ValidationError, match="knob 'precision': 'bf17'"):
        SearchSection(recipe={"precision": "bf17"})


def _screen() -> list:
    base = {"batch_size": 64, "precision": "fp32", "compile": "none", "fused_adamw": False}
    return [
        make_row("screen-0", config=base, tokens_per_s=500_000.0),
        make_row("screen-1", config={**base, **RECIPE, "batch_size": 128}, tokens_per_s=3_000_000.0),
        make_row(
            "screen-2", config={**base, **RECIPE}, tokens_per_s=2_000_000.0, val_loss=1.75, feasible=True
        ),
    ]


def test_the_recipes_record_is_its_own_screen_run_and_verdict():
    found = result(RECIPE, BASE, _screen(), "OUT/recipe.yaml")
    assert (found.trial, found.tokens_per_s, found.val_loss, found.feasible) == ("screen-2", 2e6, 1.75, True)
    assert result({}, BASE, _screen(), None) is None
    assert result(RECIPE, BASE, _screen()[:2], None).trial is None  # the screen never finished it


def test_the_report_says_the_recipe_beside_the_answer():
    screen = _screen()
    summary = make_summary(
        trials=screen,
        best={"id": "screen-1", "config": screen[1].config, "tokens_per_s": 3e6},
        recipe=result(RECIPE, BASE, screen, "OUT/recipe.yaml"),
    )
    line = recipe_line(summary)
    assert "precision=bf16, compile=default, fused_adamw=True" in line
    assert "screen-2, 2,000,000 tok/s in the screen, val loss 1.7500 (within the limit)" in line
    assert "the answer screened 1.50x it" in line and "OUT/recipe.yaml trains it alone" in line
    assert recipe_line(make_summary()) == ""


# --- the recipe is a reference: never stopped early, checked and re-measured while the screen can't tell ---


LM = {"batch_size": 64, "grad_accum": 1, "lr": 1e-3, "lr_scaling": "none", "lr_base_batch": 64}
LM |= {"precision": "fp32", "compile": "none", "fused_adamw": False, "tokens": 10_240_000}
LOOSE = Limits(runs=8, time_s=1e9, tokens=10_240_000, remeasure_top=2)


def _row(tid: str, tps: float, **config):
    return make_row(tid, "screen", config, tokens_per_s=tps, warmup_s=5.0)


def test_start_points_are_never_stopped_early_the_rest_are():
    recipe = {"batch_size": 64, **RECIPE}
    stopper = SlowTrialStopper(0.5, best=3_000_000.0, keep=[recipe])
    running = {"tokens_per_s": 700_000.0, "done": False}
    assert stopper("t1", {**running, "config": {**recipe, "train": {"seq_len": 256}}}) is False
    assert stopper("t2", {**running, "config": {**recipe, "batch_size": 128}}) is True
    assert SlowTrialStopper(0.5, best=3_000_000.0)("t3", {**running, "config": recipe}) is True


def test_the_recipe_is_checked_second_and_while_its_screen_figure_is_in_reach():
    screen = [
        _row("b256", 3_300_000.0, batch_size=256, lr_scaling="linear", precision="bf16"),
        _row("fp16", 1_200_000.0, precision="fp16"),
        _row("recipe", 1_000_000.0, **RECIPE),  # under fp16's in the screen: it may be faster alone
        _row("base", 500_000.0),
    ]
    reference = row_ids(screen, RECIPE, TrainConfig(**{k: v for k, v in LM.items() if k != "tokens"}))
    assert reference == {"recipe"}
    plan = LossPlan.of(screen, LM, LOOSE, reference)
    assert [c.id for c in plan.queue] == ["fp16", "recipe", "b256"]  # the recipe's group second
    checked = []
    while plan.ended_by is None:
        for pick in plan.next_round(1):
            checked.append(pick.id)
            plan.record(pick, pick.id != "b256")
    assert checked == ["fp16", "recipe", "b256"], "the recipe checked though slower than fp16, passed first"
    without = LossPlan.of(screen, LM, LOOSE)
    assert [c.id for c in without.queue] == ["fp16", "b256", "recipe"]
    far = [*screen[:3], _row("recipe", 0.5 * 1_200_000.0, **RECIPE), screen[3]]  # under the margin: out
    plan = LossPlan.of([r for r in far if r.tokens_per_s != 1_000_000.0], LM, LOOSE, reference)
    plan.record(plan.next_round(1)[0], True)
    assert "recipe" not in [c.id for c in plan.next_round(4)]


def test_in_reach_is_the_margin():
    assert in_reach(SCREEN_MARGIN * 1e6, 1e6) and not in_reach(0.99 * SCREEN_MARGIN * 1e6, 1e6)
    assert in_reach(1.0, None) and not in_reach(None, 1e6) and not in_reach(0.0, 1e6)


def test_a_feasible_recipe_in_reach_is_re_measured_beside_the_top(tmp_path):
    cfg = load_search_config(str(ROOT / "configs" / "smoke.yaml"))
    hw = Hardware(cuda=True, bf16=True, gpus=1)
    ctx = SearchContext(
        cfg=cfg, out=tmp_path, base=cfg.train, hw=hw, cluster_cpus=2, state=State(tmp_path), command=""
    )
    knobs = {k: getattr(cfg.train, k) for k in cfg.search.space}
    recipe = make_row("screen-1", config={**knobs, "precision": "bf16", "fused_adamw": True}, feasible=True,
                      tokens_per_s=900.0)  # fmt: skip
    top = make_row("screen-2", config={**knobs, "batch_size": 64}, feasible=True, tokens_per_s=1000.0)
    assert as_run_here(cfg.search, cfg.train, hw.model_dump())["compile"] == "default"
    recipe = recipe.model_copy(update={"config": {**recipe.config, "compile": "default"}})
    inputs = remeasure_inputs(ctx, run_scheduler(ctx))
    assert _recipe_finalist(inputs, [top, recipe]) is recipe
    slow = recipe.model_copy(update={"tokens_per_s": 500.0})
    assert _recipe_finalist(inputs, [top, slow]) is None
    assert _recipe_finalist(inputs, [top]) is None
