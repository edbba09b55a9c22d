"""The loss horizon (tuner/rules/horizon.py): when the planned run is longer than `quality.loss_horizon`, the
baseline (two seeds) and every contender train the same prefix of it, equal tokens, with the planned run's
lr schedule; the loss limit is their mean + the tolerance, and the seed-to-seed noise measured there is shown
beside it, not added (tuner/rules/loss_limit.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.factories import SMALL_SMOKE_MODEL, make_row, search_context, synthetic_summary
from trainables.config import ConfigError, TrainConfig
from tuner.config import load_search_config
from tuner.context import SearchContext
from tuner.measure import baseline
from tuner.phases import loss_check
from tuner.pipeline import beside_inputs, loss_check_inputs, run_scheduler
from tuner.report.horizon_section import HEAD
from tuner.report.html import render_html
from tuner.report.markdown import render_markdown
from tuner.rules.horizon import (
    VALIDATION_FILE,
    LossHorizon,
    at_horizon,
    horizon_for,
    parse_tokens,
    step_tokens,
    validation_note,
)
from tuner.runs.ledger import Ledger
from tuner.state.hardware import Hardware
from tuner.state.records import BASELINE_ID, BESIDE_PHASE, LossLimit
from tuner.state.search_state import State

SMOKE = str(
    Path(__file__).resolve().parents[1] / "configs" / "smoke.yaml"
)  # batch 16 x seq 64; the space's batches 8-64: 512-4096 tokens per step


def baseline_loss(ctx: SearchContext) -> baseline.BaselineLoss:
    """What the loss check hands the baseline's rules (phases/loss_check.py)."""
    return baseline.BaselineLoss(ctx.shapes, ctx.cfg.quality, ctx.notice)


@pytest.mark.parametrize(
    ("given", "tokens"),
    [(20_000_000, 20_000_000), ("20M", 20_000_000), ("1.5B", 1_500_000_000), ("500K", 500_000)],
)
def test_a_loss_horizon_is_tokens_written_plainly_or_with_a_suffix(given, tokens):
    assert parse_tokens(given) == tokens


@pytest.mark.parametrize("given", ["4m", "90s", "0", "-5", "twenty", True])
def test_a_duration_or_a_count_that_is_no_positive_number_is_one_line_naming_the_key(given):
    with pytest.raises(ConfigError) as err:
        load_search_config(SMOKE, [f"quality.loss_horizon={given}"])
    assert "quality.loss_horizon" in str(err.value) and "\n" not in str(err.value)


def test_the_prefix_is_a_whole_number_of_steps_of_every_batch_in_the_space():
    cfg = load_search_config(SMOKE, ["train.tokens=1000000"])
    base, space = cfg.train, cfg.search.space
    assert step_tokens(base, space) == 4096  # lcm of 8, 16, 32 and 64 sequences of 64 tokens
    horizon = horizon_for(base, space, 10_000)
    assert horizon.tokens == 12_288 and horizon.is_prefix and horizon.fraction == pytest.approx(0.012288)
    for batch in space["batch_size"]:
        run = TrainConfig(**at_horizon({**base.model_dump(), "batch_size": batch}, horizon))
        assert run.total_steps * run.tokens_per_step == 12_288, "equal tokens for every batch"
        assert run.schedule_steps * run.tokens_per_step >= 1_000_000, "the planned run's lr schedule"


def test_a_budget_at_or_past_the_planned_run_trains_the_planned_run():
    cfg = load_search_config(SMOKE)
    base = cfg.train
    for budget in (None, base.tokens, 10 * base.tokens, base.tokens - 1):  # -1: rounds up to it
        horizon = horizon_for(base, cfg.search.space, budget)
        assert not horizon.is_prefix and at_horizon(base.model_dump(), horizon) == base.model_dump()


def test_two_seeds_set_the_baselines_loss_as_their_mean_and_their_difference_is_shown_not_added():
    horizon = LossHorizon(planned_tokens=1_000_000, tokens=100_000, step_tokens=4096)
    loss_limit = LossLimit.of(1.50, 0.05, "absolute", horizon, [1.56])
    assert loss_limit.baseline_loss == pytest.approx(1.53) and loss_limit.noise == pytest.approx(0.06)
    assert loss_limit.limit == pytest.approx(1.53 + 0.05) and loss_limit.seed_losses == [1.50, 1.56]
    assert loss_limit.passes(1.579) and not loss_limit.passes(1.581), "the spread does not widen it"
    relative = LossLimit.of(2.0, 0.1, "relative", horizon, [2.2])
    assert relative.limit == pytest.approx(2.1 * 1.1)
    full = LossLimit.of(1.50, 0.05, "absolute")  # the planned run: one seed, the tolerance as configured
    assert full.limit == pytest.approx(1.55) and full.noise is None and full.seed_losses == []


def test_a_validation_is_cited_where_the_bench_wrote_one(tmp_path):
    path = tmp_path / "agreement.json"
    assert validation_note(path) is None
    path.write_text('{"agreed": 11, "total": 12, "fraction": 0.1, "config": "configs/default.yaml"}')
    assert "11/12" in validation_note(path) and "10%" in validation_note(path)
    # the default is the file the bench writes in this checkout (the regroup once pointed it at tuner/docs/)
    assert VALIDATION_FILE.is_file() and validation_note() is not None


def test_at_the_planned_run_the_baseline_trains_one_seed(tmp_path):
    cfg = load_search_config(SMOKE)
    ctx = search_context(cfg, tmp_path)
    assert baseline.noise_cases(ctx.shapes.horizon, ctx.base.model_dump()) == []
    cfg = load_search_config(SMOKE, ["quality.loss_horizon=8192", "train.tokens=65536"])
    ctx = search_context(cfg, tmp_path)
    assert [c["seed"] for c in baseline.noise_cases(ctx.shapes.horizon, ctx.base.model_dump())] == [
        ctx.base.seed + 1
    ]


def test_loss_runs_stop_at_the_prefix_and_the_loss_limit_takes_both_seeds(tmp_path, two_fake_gpus):
    """Real Tune trials of the smoke model on the CPU: the planned run is 64 steps of batch 16, the loss
    horizon a quarter of it, 16,384 tokens."""
    overrides = ["train.tokens=65536", "train.eval_tokens=2048", "search.loss_check_top=1",
                 "quality.loss_horizon=16K", *SMALL_SMOKE_MODEL]  # fmt: skip
    cfg = load_search_config(SMOKE, overrides)
    ctx = search_context(cfg, tmp_path)
    screen = [
        make_row("screen-0", config={"batch_size": 32}, tokens_per_s=3_000.0),
        make_row("screen-1", config={"loader": "device"}, tokens_per_s=2_000.0),  # the baseline's twin
    ]
    rows = loss_check.check_losses(loss_check_inputs(ctx, run_scheduler(ctx)), screen).rows
    assert [r.id for r in rows] == [BASELINE_ID, f"{BASELINE_ID}-seed1338", rows[2].id]
    assert rows[2].screen_id == "screen-0"
    for row in rows:
        assert row.status == "ok" and row.tokens == 16_384, f"{row.id} trained the prefix, not the run"
        assert row.train["tokens"] == 65_536, "with the planned run's schedule"
    assert rows[2].steps == 16_384 // (32 * 64) and rows[0].steps == 16_384 // (16 * 64)
    base_row, loss_limit, candidates = baseline.split_checked(baseline_loss(ctx), rows)
    assert base_row.id == BASELINE_ID and [c.id for c in candidates] == [rows[2].id]
    assert loss_limit.horizon.tokens == 16_384 and loss_limit.horizon.planned_tokens == 65_536
    seeds = [rows[0].val_loss, rows[1].val_loss]
    assert loss_limit.seed_losses == seeds and seeds[0] != seeds[1], "another seed, another loss"
    assert loss_limit.noise == pytest.approx(abs(seeds[0] - seeds[1]))
    assert loss_limit.baseline_loss == pytest.approx(sum(seeds) / 2)
    assert loss_limit.limit == pytest.approx(loss_limit.baseline_loss + 0.05), "the noise is not added"
    assert rows[2].feasible == loss_limit.passes(rows[2].val_loss)


def test_the_report_says_which_horizon_judged_the_noise_and_how_far_to_trust_it():
    summary = synthetic_summary()
    horizon = LossHorizon(planned_tokens=1_000_000_000, tokens=20_004_864, step_tokens=32_768)
    loss_limit = LossLimit.of(1.50, 0.05, "absolute", horizon, [1.52])
    # the loss limit cites docs/results/horizon_agreement.json where the bench wrote one: here, as if it
    # had not
    loss_limit = loss_limit.model_copy(update={"validation": None})
    text = render_markdown({**summary, "loss_limit": loss_limit.model_dump()})
    section = text.split(f"## {HEAD}\n", 1)[1].split("\n## ", 1)[0]
    assert "prefix of 20,004,864 tokens, 2.0% of the planned run's 1,000,000,000" in section
    assert "1.5000 and 1.5200 (difference 0.0200)" in section
    assert "limit 1.5600 = baseline 1.5100 + 0.05, the absolute tolerance" in section
    assert "shown for judging, not added to the limit" in section
    assert "no validation of short-horizon verdicts is recorded" in section
    measured = text.split("## How each number was measured\n", 1)[1].split("\n## ", 1)[0]
    assert "loss horizon, a 20,004,864-token prefix of the planned run (2.0%)" in measured
    validated = loss_limit.model_copy(update={"validation": "on configs/default.yaml: 11/12 agreed"})
    text = render_markdown({**summary, "loss_limit": validated.model_dump()})
    assert "checked against full runs on configs/default.yaml: 11/12 agreed" in text
    full = render_markdown({**summary, "loss_limit": LossLimit.of(1.5, 0.05, "absolute").model_dump()})
    assert "At the full planned run: every loss run trained it" in full


def test_the_html_report_says_the_loss_runs_trained_the_prefix_not_the_full_budget():
    horizon = LossHorizon(planned_tokens=1_000_000_000, tokens=20_004_864, step_tokens=32_768)
    loss_limit = LossLimit.of(1.50, 0.05, "absolute", horizon, [1.52])
    page = render_html({**synthetic_summary(), "loss_limit": loss_limit.model_dump()})
    prefix = "loss horizon, a 20,004,864-token prefix of the planned run (2.0%)"
    assert f"Loss: at the {prefix}" in page  # the table's note
    assert f"Val loss at the {prefix}" in page  # the Pareto chart's caption
    assert "Loss: at the full token budget" in render_html(synthetic_summary())


BESIDE_OVERRIDES = ["train.tokens=65536", "train.eval_tokens=2048", "search.loss_check_top=1",
                    "quality.loss_horizon=16K", "resources.speed_runs_per_gpu=2", *SMALL_SMOKE_MODEL]  # fmt: skip


def beside_context(out: Path, *overrides: str) -> SearchContext:
    """Two GPUs of two speed-run places each: room beside the screen for both of the baseline's seeds."""
    cfg = load_search_config(SMOKE, [*BESIDE_OVERRIDES, *overrides])
    cfg.search.start_points = [{"loader": "device"}]  # shares the baseline's loss knobs: its twin
    return SearchContext(
        cfg=cfg,
        out=out,
        base=cfg.train,
        hw=Hardware(gpus=2, gpu_mem_mb=81_559),
        cluster_cpus=4,
        state=State(out),
        command="",
    )


def beside_screen(ctx: SearchContext) -> baseline.Beside:
    """What the pipeline hands the baseline's runs beside the screen (tuner/pipeline.py)."""
    return beside_inputs(ctx, loss_check_inputs(ctx, run_scheduler(ctx)))


def start_both(ctx: SearchContext):
    room = beside_screen(ctx)
    beside = baseline.start_beside(room, {"loader": ["dataloader", "device"]})
    return beside, baseline.start_seeds_beside(room, beside)


def test_beside_the_screen_both_seeds_train_the_prefix_and_round_0_trains_no_baseline(
    tmp_path, two_fake_gpus
):
    """The baseline's run at its second seed trains beside the screen as its first does (the fp32 8M-token
    prefix of configs/hybrid-100m.yaml: 7-9 minutes the loss check no longer waits for); round 0 takes its
    row and trains only the candidate; a resumed search rebuilds the same loss limit from the ledger."""
    ctx = beside_context(tmp_path)
    beside, seeds = start_both(ctx)
    assert beside is not None and [run.spec.train.seed for run in seeds] == [1338]
    for run in (beside, *seeds):
        assert run.ref is not None and run.spec.train.max_steps == 16, "16 steps of 16 x 64 tokens"
        assert run.spec.placement == beside.spec.placement
    screen = [
        make_row("screen-0", config={"loader": "device"}, tokens_per_s=2_000.0),  # the twin
        make_row("screen-1", config={"lr": 1e-3}, tokens_per_s=2_500.0),  # a loss of its own, faster
    ]
    rows = loss_check.check_losses(
        loss_check_inputs(ctx, run_scheduler(ctx)), screen, beside, None, seeds
    ).rows
    assert [r.id for r in rows[:2]] == [BASELINE_ID, f"{BASELINE_ID}-seed1338"]
    kept = {r.train["seed"]: r for r in Ledger(tmp_path, BESIDE_PHASE).rows()}
    assert sorted(kept) == [1337, 1338], "both seeds trained beside the screen"
    assert rows[0].val_loss == kept[1337].val_loss and rows[1].val_loss == kept[1338].val_loss
    assert rows[1].twin_of == "screen-0" and rows[1].execution["loader"] == "device"
    round_0 = Ledger(tmp_path, "loss_check_0").rows()
    assert [r.screen_id for r in round_0] == ["screen-1"], "round 0 trained the candidate, no baseline"
    assert not Ledger(tmp_path, "loss_check_baseline").rows()
    assert all(r.tokens == 16_384 and r.train["tokens"] == 65_536 for r in rows)
    _, loss_limit, candidates = baseline.split_checked(baseline_loss(ctx), rows)
    assert [c.screen_id for c in candidates] == ["screen-1"]
    assert (
        loss_limit.seed_losses == [kept[1337].val_loss, kept[1338].val_loss] and loss_limit.noise is not None
    )

    resumed = beside_context(tmp_path)  # the driver died after the screen: --resume reads the ledgers
    beside, seeds = start_both(resumed)
    assert beside.ref is None and [run.ref for run in seeds] == [None], "nothing trains again"
    again = loss_check.check_losses(
        loss_check_inputs(resumed, run_scheduler(resumed)), screen, beside, None, seeds
    ).rows
    assert [(r.id, r.val_loss) for r in again] == [(r.id, r.val_loss) for r in rows]
    assert baseline.split_checked(baseline_loss(resumed), again)[1] == loss_limit


def test_a_seed_whose_run_beside_the_screen_failed_trains_in_a_round_of_its_own(tmp_path, two_fake_gpus):
    """A resumed search whose ledger holds the first seed's run beside the screen and the second seed's
    failed one: the second trains in the loss check (loss_check_baseline), the first is not trained again."""
    ctx = beside_context(tmp_path)
    ledger, base = Ledger(tmp_path, BESIDE_PHASE), {**ctx.base.model_dump(), "max_steps": 16}
    ledger.append(make_row("x", train=base, val_loss=3.0, tokens=16_384).model_dump(exclude={"id", "phase"}))
    failed = make_row("x", train={**base, "seed": 1338}, status="error", error="RuntimeError: CUDA error")
    ledger.append(failed.model_dump(exclude={"id", "phase"}))
    beside, seeds = start_both(ctx)
    assert beside.ref is None and [run.ref for run in seeds] == [None]
    screen = [make_row("screen-0", config={"loader": "device"}, tokens_per_s=2_000.0)]
    rows = loss_check.check_losses(
        loss_check_inputs(ctx, run_scheduler(ctx)), screen, beside, None, seeds
    ).rows
    assert any("seed 1338 beside the screen failed (RuntimeError: CUDA error)" in n for n in ctx.notices)
    again = Ledger(tmp_path, "loss_check_baseline").rows()
    assert [r.train["seed"] for r in again] == [1338] and again[0].status == "ok"
    assert [r.id for r in rows] == [BASELINE_ID, f"{BASELINE_ID}-seed1338"]
    assert rows[0].val_loss == 3.0 and rows[1].val_loss == again[0].val_loss and rows[1].tokens == 16_384
    assert baseline.split_checked(baseline_loss(ctx), rows)[1].seed_losses == [3.0, again[0].val_loss]


def test_without_room_for_both_beside_the_screen_round_0_trains_the_second_seed(tmp_path, two_fake_gpus):
    """One speed-run place per GPU, two in all: the first seed's run takes one from the screen, and a second
    would take its last, so round 0 trains the second seed's run as it did before runs beside."""
    ctx = beside_context(tmp_path, "resources.speed_runs_per_gpu=1")
    beside, seeds = start_both(ctx)
    assert beside is not None and beside.ref is not None and seeds == []
    screen = [make_row("screen-0", config={"loader": "device"}, tokens_per_s=2_000.0)]
    rows = loss_check.check_losses(
        loss_check_inputs(ctx, run_scheduler(ctx)), screen, beside, None, seeds
    ).rows
    assert [r.id for r in rows] == [BASELINE_ID, f"{BASELINE_ID}-seed1338"]
    assert [r.train["seed"] for r in Ledger(tmp_path, BESIDE_PHASE).rows()] == [1337]
    assert [r.train["seed"] for r in Ledger(tmp_path, "loss_check_0").rows()] == [1338]
    assert all(r.tokens == 16_384 and r.train["tokens"] == 65_536 for r in rows)
    assert baseline.split_checked(baseline_loss(ctx), rows)[1].seed_losses == [
        rows[0].val_loss,
        rows[1].val_loss,
    ]
