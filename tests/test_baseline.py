"""The baseline's loss run borrows the execution of its twin: the fastest screened run with its loss knobs."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from factories import make_row

from trainables.config import TrainConfig
from trainables.spec import TrialSpec
from tuner.config import QualitySection, load_search_config
from tuner.context import SearchContext
from tuner.measure import baseline
from tuner.measure.baseline import (
    BaselineLoss,
    _execution_of,
    _twin_point,
    beside_point,
    loss_case,
    start_beside,
    start_seeds_beside,
    twins,
)
from tuner.pipeline import beside_inputs, loss_check_inputs, run_scheduler
from tuner.rules.horizon import horizon_for
from tuner.runs.ledger import Ledger
from tuner.runs.request import Role
from tuner.runs.shapes import RunShapes
from tuner.runs.tasks import TaskRun
from tuner.state.hardware import Hardware
from tuner.state.records import BESIDE_PHASE
from tuner.state.search_state import State

BASE = {"batch_size": 8, "precision": "fp32", "compile": "none", "loader": "dataloader", "lr_scaling": "none"}


def ctx():
    base, notices = TrainConfig(**BASE), []
    shapes = RunShapes(base, 8, horizon_for(base, {}, None))  # the planned run
    return SimpleNamespace(
        base=base, notices=notices, loss=BaselineLoss(shapes, QualitySection(), notices.append)
    )


def test_a_twin_the_early_stopper_stopped_after_steady_steps_still_lends_its_execution():
    screen = [
        make_row("screen-0", config={"batch_size": 64, "compile": "reduce-overhead"}, tokens_per_s=700e3),
        make_row("screen-1", config={"compile": "reduce-overhead"}, status="stopped", tokens_per_s=97e3),
        make_row("screen-2", config={"loader": "device"}, tokens_per_s=14e3),
    ]
    case, twin = loss_case(ctx().loss, screen)
    assert twin.id == "screen-1"
    assert case["compile"] == "reduce-overhead" and case["batch_size"] == 8


def test_runs_that_failed_or_never_reached_steady_steps_are_no_twins():
    screen = [
        make_row("screen-0", config={"compile": "max-autotune"}, status="timeout", tokens_per_s=None),
        make_row("screen-1", config={"compile": "reduce-overhead"}, status="stopped", tokens_per_s=0.0),
        make_row("screen-2", config={"compile": "default"}, status="error", tokens_per_s=0.0),
        make_row("screen-3", config={"loader": "device"}, tokens_per_s=14e3),
    ]
    assert [t.id for t in twins(ctx().base, screen).values()] == ["screen-3"]
    case, twin = loss_case(ctx().loss, screen)
    assert twin.id == "screen-3" and case["compile"] == "none"


def test_without_a_twin_the_baseline_trains_as_configured():
    c = ctx()
    case, twin = loss_case(c.loss, [make_row("screen-0", config={"batch_size": 64}, tokens_per_s=1e5)])
    assert twin is None and case["compile"] == "none" and c.notices


# --- the baseline's loss run beside the screen --------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]


def search_context(tmp_path, gpus: int, *overrides: str, **search) -> SearchContext:
    cfg = load_search_config(
        str(ROOT / "configs" / "default.yaml"), [*overrides, *(f"search.{k}={v}" for k, v in search.items())]
    )
    hw = Hardware(gpus=gpus, gpu_mem_mb=81_559)
    tmp_path.mkdir(parents=True, exist_ok=True)
    return SearchContext(
        cfg=cfg,
        out=tmp_path,
        base=cfg.train,
        hw=hw,
        cluster_cpus=16 * max(1, gpus),
        state=State(tmp_path),
        command="",
    )


def test_the_default_configs_first_start_point_lends_the_baselines_loss_run_its_execution(tmp_path):
    ctx = search_context(tmp_path, gpus=1)
    point = _twin_point(ctx.cfg.search.start_points, to_space(ctx), ctx.base, ctx.notice)
    assert point["compile"] == "reduce-overhead" and point["batch_size"] == 8 and point["precision"] == "fp32"
    case = ctx.shapes.case(Role.BESIDE, _execution_of(ctx.base, point))
    assert ctx.placement.beside_share(case) == pytest.approx(1 / 6)  # one of the GPU's six screen-run places


def test_no_loss_run_beside_the_screen_on_cpus_without_a_twin_start_point_or_after_the_loss_check(tmp_path):
    assert start_beside(beside_screen(search_context(tmp_path / "cpu", gpus=0)), {}) is None
    ctx = search_context(tmp_path / "one-place", gpus=1)
    # one screen run at a time: the loss run would take the screen's only place
    ctx = replace(ctx, cluster_cpus=2)
    assert start_beside(beside_screen(ctx), to_space(ctx)) is None
    ctx = search_context(tmp_path / "resumed", gpus=1)
    ctx.state.finish("loss_check", [], 1.0)
    assert start_beside(beside_screen(ctx), to_space(ctx)) is None


def test_without_a_twin_start_point_the_baselines_loss_run_trains_beside_the_screen_as_configured(tmp_path):
    """nanoGPT's GPU config names no start point that trains what the baseline trains: its loss run trained
    only in the loss check, after the screen, so no loss limit reached the screen's sampler (one H100,
    2026-12-07). Now the baseline's own point lends it its execution; a given twin start point still wins."""
    ctx = search_context(tmp_path / "none", gpus=1, start_points="[{batch_size: 64}]")
    point = beside_point(beside_screen(ctx), to_space(ctx))
    assert point is not None and {k: point[k] for k in ("batch_size", "precision", "compile")} == {
        "batch_size": 8,
        "precision": "fp32",
        "compile": "none",
    }, "the baseline as the screen runs it"
    ctx = search_context(tmp_path / "given", gpus=1)
    assert beside_point(beside_screen(ctx), to_space(ctx))["compile"] == "reduce-overhead"


def test_a_slow_run_beside_the_screen_gives_way_to_its_fast_twin_only_where_that_ends_sooner():
    shapes = RunShapes(TrainConfig(**BASE), 8, horizon_for(TrainConfig(**BASE), {}, None))
    rule = BaselineLoss(shapes, QualitySection(), print)
    eager = make_row(
        "screen-0", "screen", {}, tokens_per_s=15_000.0
    )  # the baseline's own point, as configured
    graphs = make_row(
        "screen-1", "screen", {"compile": "reduce-overhead"}, tokens_per_s=150_000.0, warmup_s=60.0
    )
    started = time.time() - 30.0  # 30 s of an eager run of ~680 s: anew ends at ~68 + 60 s
    running = SimpleNamespace(done=lambda: False, point={}, started=started)
    assert baseline.sooner_anew(rule, running, [eager, graphs])
    late = SimpleNamespace(done=lambda: False, point={}, started=time.time() - 600.0)  # ~80 s left: keep it
    assert not baseline.sooner_anew(rule, late, [eager, graphs])
    assert not baseline.sooner_anew(
        rule, SimpleNamespace(done=lambda: True, point={}, started=started), [eager, graphs]
    )
    assert not baseline.sooner_anew(rule, running, [eager]), "no faster twin screened"


def beside_screen(ctx: SearchContext) -> baseline.Beside:
    """What the pipeline hands the baseline's runs beside the screen (tuner/pipeline.py)."""
    return beside_inputs(ctx, loss_check_inputs(ctx, run_scheduler(ctx)))


def to_space(ctx: SearchContext) -> dict:
    return ctx.cfg.search.space


HORIZON = "quality.loss_horizon=1M"  # a prefix of the default config's 10,240,000 tokens


def first_beside(ctx: SearchContext) -> TaskRun:
    """The first seed's run beside the screen as start_beside builds it (its task aside: none is started)."""
    point = _twin_point(ctx.cfg.search.start_points, to_space(ctx), ctx.base, ctx.notice)
    case = {**ctx.shapes.case(Role.BESIDE, _execution_of(ctx.base, point)), "max_steps": 40}
    return TaskRun(None, TrialSpec.of(case).with_placement(gpu_share=1 / 6), point, 0.0)


def test_the_second_seed_trains_beside_the_screen_only_at_a_prefix_and_where_the_screen_keeps_a_place(
    tmp_path,
):
    ctx = search_context(tmp_path / "full", 1)  # the planned run: one seed, nothing more beside
    assert start_seeds_beside(beside_screen(ctx), first_beside(ctx)) == []
    ctx = search_context(tmp_path / "none", 1, HORIZON)
    assert start_seeds_beside(beside_screen(ctx), None) == [], (
        "no first seed's run beside the screen: round 0 trains both"
    )
    ctx = search_context(tmp_path / "two-places", 1, HORIZON)
    # two screen runs at a time: the first seed's run takes one, the screen keeps one
    ctx = replace(ctx, cluster_cpus=4)
    assert (
        ctx.placement.speed().concurrent == 2
        and ctx.placement.room_beside()
        and not ctx.placement.room_beside(runs=2)
    )
    assert start_seeds_beside(beside_screen(ctx), first_beside(ctx)) == []


def test_a_resumed_search_takes_the_second_seeds_row_from_the_ledger_and_starts_no_run(tmp_path):
    ctx = search_context(tmp_path, 1, HORIZON)
    first = first_beside(ctx)
    second = first.spec.with_train(seed=1338).train.model_dump()
    row = make_row("x", BESIDE_PHASE, train=second, val_loss=2.5)
    Ledger(tmp_path, BESIDE_PHASE).append(row.model_dump(exclude={"id", "phase"}))
    (seed,) = start_seeds_beside(beside_screen(ctx), first)
    assert seed.ref is None and seed.point == first.point, "its row is in the ledger: no run starts"
    assert seed.spec.train == first.spec.train.model_copy(update={"seed": 1338})
    assert seed.spec.placement == first.spec.placement, "the first seed's GPU share"
