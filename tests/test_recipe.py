"""The usual hand recipe (tuner/recipe.py): always a start point of the screen, trimmed to what the hardware
runs, recorded in summary.json and said in the report beside the answer."""

from __future__ import annotations

import pytest
from factories import make_row, make_summary
from pydantic import ValidationError

from trainables.config import TrainConfig
from tuner.config import RECIPE, SearchConfig, SearchSection
from tuner.recipe import as_run_here, in_space, recipe_point, result, start_points
from tuner.report.recipe_section import recipe_line
from tuner.space import applicable

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
