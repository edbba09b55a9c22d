"""The loss horizon (tuner/horizon.py): when the planned run is longer than `quality.loss_horizon`, the
baseline (two seeds) and every contender train the same prefix of it, equal tokens, with the planned run's
lr schedule, and the gate allows for the baseline's seed-to-seed noise measured there."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.factories import make_row, synthetic_summary
from trainables.config import ConfigError, TrainConfig
from tuner import baseline
from tuner.config import load_search_config
from tuner.context import SearchContext, State
from tuner.horizon import LossHorizon, at_horizon, horizon_for, parse_tokens, step_tokens, validation_note
from tuner.phases import loss_check
from tuner.records import BASELINE_ID, BESIDE_PHASE, Hardware, LossGate
from tuner.report.horizon_section import HEAD
from tuner.report.markdown import render_markdown
from tuner.runs.ledger import Ledger

SMOKE = str(
    Path(__file__).resolve().parents[1] / "configs" / "smoke.yaml"
)  # batch 16 x seq 64; the space's batches 8-64: 512-4096 tokens per step


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
    base, space = cfg.baseline().model_dump(), cfg.search.space
    assert step_tokens(base, space) == 4096  # lcm of 8, 16, 32 and 64 sequences of 64 tokens
    horizon = horizon_for(base, space, 10_000)
    assert horizon.tokens == 12_288 and horizon.is_prefix and horizon.fraction == pytest.approx(0.012288)
    for batch in space["batch_size"]:
        run = TrainConfig(**at_horizon({**base, "batch_size": batch}, horizon))
        assert run.total_steps * run.tokens_per_step == 12_288, "equal tokens for every batch"
        assert run.schedule_steps * run.tokens_per_step >= 1_000_000, "the planned run's lr schedule"


def test_a_budget_at_or_past_the_planned_run_trains_the_planned_run():
    cfg = load_search_config(SMOKE)
    base = cfg.baseline().model_dump()
    for budget in (None, base["tokens"], 10 * base["tokens"], base["tokens"] - 1):  # -1: rounds up to it
        horizon = horizon_for(base, cfg.search.space, budget)
        assert not horizon.is_prefix and at_horizon(base, horizon) == base


def test_two_seeds_set_the_baselines_loss_and_widen_the_tolerance_by_their_difference():
    horizon = LossHorizon(planned_tokens=1_000_000, tokens=100_000, step_tokens=4096)
    gate = LossGate.of(1.50, 0.05, "absolute", horizon, [1.56])
    assert gate.baseline_loss == pytest.approx(1.53) and gate.noise == pytest.approx(0.06)
    assert gate.limit == pytest.approx(1.53 + 0.05 + 0.06) and gate.seed_losses == [1.50, 1.56]
    assert gate.passes(1.639) and not gate.passes(1.641)
    relative = LossGate.of(2.0, 0.1, "relative", horizon, [2.2])
    assert relative.limit == pytest.approx(2.1 + 0.21 + 0.2)
    full = LossGate.of(1.50, 0.05, "absolute")  # the planned run: one seed, the tolerance as configured
    assert full.limit == pytest.approx(1.55) and full.noise is None and full.seed_losses == []


def test_a_validation_is_cited_where_the_bench_wrote_one(tmp_path):
    path = tmp_path / "agreement.json"
    assert validation_note(path) is None
    path.write_text('{"agreed": 11, "total": 12, "fraction": 0.1, "config": "configs/default.yaml"}')
    assert "11/12" in validation_note(path) and "10%" in validation_note(path)


def test_at_the_planned_run_the_baseline_trains_one_seed():
    cfg = load_search_config(SMOKE)
    ctx = SimpleNamespace(cfg=cfg, base=cfg.baseline().model_dump())
    assert baseline.noise_cases(ctx, ctx.base) == []
    cfg = load_search_config(SMOKE, ["quality.loss_horizon=8192", "train.tokens=65536"])
    ctx = SimpleNamespace(cfg=cfg, base=cfg.baseline().model_dump())
    assert [c["seed"] for c in baseline.noise_cases(ctx, ctx.base)] == [ctx.base["seed"] + 1]


def test_loss_runs_stop_at_the_prefix_and_the_gate_takes_both_seeds(tmp_path, one_cpu_ray):
    """Real Tune trials of the smoke model on the CPU: the planned run is 64 steps of batch 16, the loss
    horizon a quarter of it, 16,384 tokens."""
    overrides = ["train.tokens=65536", "train.eval_tokens=2048", "search.loss_check_top=1",
                 "quality.loss_horizon=16K"]  # fmt: skip
    cfg = load_search_config(SMOKE, overrides)
    ctx = SearchContext(cfg, tmp_path, cfg.baseline().model_dump(), Hardware(gpus=0), 1, State(tmp_path), "")
    screen = [
        make_row("screen-0", config={"batch_size": 32}, tokens_per_s=3_000.0),
        make_row("screen-1", config={"loader": "device"}, tokens_per_s=2_000.0),  # the baseline's twin
    ]
    rows = loss_check.run(ctx, screen)
    assert [r.id for r in rows] == [BASELINE_ID, f"{BASELINE_ID}-seed1338", rows[2].id]
    assert rows[2].screen_id == "screen-0"
    for row in rows:
        assert row.status == "ok" and row.tokens == 16_384, f"{row.id} trained the prefix, not the run"
        assert row.train["tokens"] == 65_536, "with the planned run's schedule"
    assert rows[2].steps == 16_384 // (32 * 64) and rows[0].steps == 16_384 // (16 * 64)
    base_row, gate, candidates = baseline.split_checked(ctx, rows)
    assert base_row.id == BASELINE_ID and [c.id for c in candidates] == [rows[2].id]
    assert gate.horizon.tokens == 16_384 and gate.horizon.planned_tokens == 65_536
    seeds = [rows[0].val_loss, rows[1].val_loss]
    assert gate.seed_losses == seeds and seeds[0] != seeds[1], "another seed, another loss"
    assert gate.noise == pytest.approx(abs(seeds[0] - seeds[1]))
    assert gate.baseline_loss == pytest.approx(sum(seeds) / 2)
    assert gate.limit == pytest.approx(gate.baseline_loss + 0.05 + gate.noise)
    assert rows[2].feasible == gate.passes(rows[2].val_loss)


def test_the_report_says_which_horizon_judged_the_noise_and_how_far_to_trust_it():
    summary = synthetic_summary()
    horizon = LossHorizon(planned_tokens=1_000_000_000, tokens=20_004_864, step_tokens=32_768)
    gate = LossGate.of(1.50, 0.05, "absolute", horizon, [1.52])
    # the gate cites docs/results/horizon_agreement.json where the bench wrote one: here, as if it had not
    gate = gate.model_copy(update={"validation": None})
    text = render_markdown({**summary, "loss_gate": gate.model_dump()})
    section = text.split(f"## {HEAD}\n", 1)[1].split("\n## ", 1)[0]
    assert "prefix of 20,004,864 tokens, 2.0% of the planned run's 1,000,000,000" in section
    assert "1.5000 and 1.5200 (difference 0.0200)" in section and "= 1.5800" in section
    assert "no validation of short-horizon verdicts is recorded" in section
    measured = text.split("## How each number was measured\n", 1)[1].split("\n## ", 1)[0]
    assert "loss horizon, a 20,004,864-token prefix of the planned run (2.0%)" in measured
    validated = gate.model_copy(update={"validation": "on configs/default.yaml: 11/12 agreed"})
    text = render_markdown({**summary, "loss_gate": validated.model_dump()})
    assert "checked against full runs on configs/default.yaml: 11/12 agreed" in text
    full = render_markdown({**summary, "loss_gate": LossGate.of(1.5, 0.05, "absolute").model_dump()})
    assert "At the full planned run: every loss run trained it" in full


def test_beside_the_screen_the_baseline_trains_the_prefix_and_round_0_its_second_seed(tmp_path):
    """A local Ray that advertises two GPUs it does not have (as tests/test_loss_ahead.py): the baseline's
    loss run trains beside the screen as a Ray task, cut to the prefix; round 0 trains its second seed."""
    import ray

    from trainables.gate import open_gates

    overrides = ["train.tokens=65536", "train.eval_tokens=2048", "search.loss_check_top=1",
                 "quality.loss_horizon=16K", "resources.speed_runs_per_gpu=2"]  # fmt: skip
    cfg = load_search_config(SMOKE, overrides)
    cfg.search.start_points = [{"loader": "device"}]  # shares the baseline's loss knobs: its twin
    ctx = SearchContext(cfg, tmp_path, cfg.baseline().model_dump(), Hardware(gpus=2, gpu_mem_mb=81_559), 4,
                        State(tmp_path), "")  # fmt: skip
    ray.init(address="local", num_cpus=4, num_gpus=2, include_dashboard=False, log_to_driver=False)
    try:
        gates = open_gates()
        beside = baseline.start_beside(ctx, {"loader": ["dataloader", "device"]})
        assert beside is not None and beside.spec.train.max_steps == 16, "16 steps of 16 x 64 tokens"
        screen = [make_row("screen-0", config={"loader": "device"}, tokens_per_s=2_000.0)]
        rows = loss_check.run(ctx, screen, beside)
        del gates
    finally:
        ray.shutdown()
    assert [r.id for r in rows] == [BASELINE_ID, f"{BASELINE_ID}-seed1338"]
    beside_rows = Ledger(tmp_path, BESIDE_PHASE).rows()  # the first seed trained beside, not in a round
    assert len(beside_rows) == 1 and beside_rows[0].val_loss == rows[0].val_loss
    assert [r.train["seed"] for r in rows] == [1337, 1338]
    assert all(r.tokens == 16_384 and r.train["tokens"] == 65_536 for r in rows)
    _, gate, candidates = baseline.split_checked(ctx, rows)
    assert candidates == [] and gate.seed_losses == [rows[0].val_loss, rows[1].val_loss]
