"""The search's estimate of its loss check, from what the screen measured (tuner/measure/eta.py)."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from tests.factories import make_row
from tests.test_failures import FakeTrial
from trainables.common.progress import fmt_seconds
from trainables.spec import TrialSpec
from tuner.config import load_search_config
from tuner.context import SearchContext
from tuner.decide.costs import CACHED_SHARE, cached_warmup
from tuner.measure.eta import Remaining, after_screen, loss_check_s, remeasure_s
from tuner.runs.ahead import pending
from tuner.runs.ledger import Ledger, LedgerRecorder
from tuner.runs.phase_progress import PhaseProgress
from tuner.runs.request import Role
from tuner.runs.tasks import Pending, PendingRun, TaskRun
from tuner.state.hardware import Hardware
from tuner.state.search_state import State

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def eta_context(out: Path, *overrides: str, config: str = "default.yaml", gpus: int = 1) -> SearchContext:
    """A search's context as the pipeline builds it, on `gpus` H200s: the ETA reads the config's baseline,
    its space and its loss horizon from it."""
    cfg = load_search_config(str(CONFIGS / config), list(overrides))
    hw = Hardware(gpus=gpus, gpu_mem_mb=143_771)
    return SearchContext(
        cfg=cfg, out=out, base=cfg.train, hw=hw, cluster_cpus=16 * gpus, state=State(out), command=""
    )


def remaining(ctx: SearchContext) -> Remaining:
    """What the pipeline hands the estimate once the screen is done (tuner/pipeline.py)."""
    confirming, loss_checked = (
        bool(ctx.state.data.get("remembered")),
        ctx.state.phase("loss_check") is not None,
    )
    return Remaining(ctx.shapes, ctx.cfg.search, ctx.hw.gpus, confirming, loss_checked)


# configs/default.yaml's baseline: batch 8 of 256 tokens, fp32, eager, lr 3e-4, 10,240,000 tokens
BASE = load_search_config(str(CONFIGS / "default.yaml")).train.model_dump()


def seeds_beside(done: int, runs: int) -> Pending:
    """The baseline's `runs` loss runs beside the screen as the scheduler says, `done` of them ended."""
    return Pending(tuple(PendingRun(Role.BESIDE, {}, done=n < done) for n in range(runs)))


def screened(tid: str, tps: float, warmup: float, status: str = "ok", cache: str | None = None, **config):
    return make_row(
        tid, "screen", config, status=status, tokens_per_s=tps, warmup_s=warmup, compile_cache_use=cache
    )


def test_loss_check_estimate_counts_cached_compiles_the_twin_and_the_shared_gpu(tmp_path):
    # Run G's screen in small. The loss check's runs find their graphs in the search's cache: a graph the
    # screen also timed from the cache costs that hit's warm-up, another a tenth of its cold compile.
    ro = {"batch_size": 32, "precision": "bf16", "compile": "reduce-overhead"}
    screen = [
        screened("first", 500_000.0, 120.0, **ro, cache="miss"),  # compiled the graph cold
        screened("cached", 580_000.0, 8.0, **ro, lr=6e-4, cache="hit"),  # same graph
        screened("b64", 447_000.0, 118.0, **{**ro, "batch_size": 64}, cache="miss"),
        screened("twin", 113_000.0, 96.0, status="stopped", compile="reduce-overhead"),
        screened("slow", 40_000.0, 2.0, status="stopped", batch_size=32),
    ]
    ctx = eta_context(tmp_path, "search.remeasure_top=3")
    tokens = BASE["tokens"]
    work = tokens * (1 / 580_000 + 1 / 500_000 + 1 / 447_000 + 1 / 113_000)
    slowest_warmup = (
        118.0 * CACHED_SHARE
    )  # b64's: no hit of its graph was timed; above the twin's 9.6 and 8.0
    assert loss_check_s(remaining(ctx), screen) == pytest.approx(slowest_warmup + work)
    # the runs spread over four GPUs: the twin's run is the longest
    ctx = replace(ctx, hw=ctx.hw.model_copy(update={"gpus": 4}))
    assert loss_check_s(remaining(ctx), screen) == pytest.approx(slowest_warmup + tokens / 113_000)
    # the two fastest trained their loss runs ahead, beside the screen: b64 and the twin are left
    ctx = replace(ctx, hw=ctx.hw.model_copy(update={"gpus": 1}))
    ahead = Pending(tuple(PendingRun(Role.AHEAD, r.config, done=False) for r in screen[:2]))
    left = tokens * (1 / 447_000 + 1 / 113_000)
    assert loss_check_s(remaining(ctx), screen, ahead) == pytest.approx(slowest_warmup + left)


def test_at_a_loss_horizon_the_estimate_counts_the_prefix_and_the_baselines_two_seeds(tmp_path):
    # quality.loss_horizon=1M on the default config: 8 steps of its largest batch (512 x 256 tokens)
    ctx = eta_context(tmp_path, "search.remeasure_top=3", "quality.loss_horizon=1M")
    prefix = ctx.shapes.horizon.tokens
    assert prefix == 1_048_576 < BASE["tokens"]
    ro = {"batch_size": 32, "precision": "bf16", "compile": "reduce-overhead"}
    screen = [
        screened("first", 500_000.0, 120.0, **ro, cache="miss"),
        screened("twin", 113_000.0, 96.0, status="stopped", compile="reduce-overhead"),
    ]
    warmup = 120.0 * CACHED_SHARE
    # round 0 trains the baseline at two seeds (the seed noise), both at its twin's speed
    assert loss_check_s(remaining(ctx), screen) == pytest.approx(
        warmup + prefix * (1 / 500_000 + 2 / 113_000)
    )
    # one of them done beside the screen; both
    assert loss_check_s(remaining(ctx), screen, seeds_beside(1, 2)) == pytest.approx(
        warmup + prefix * (1 / 500_000 + 1 / 113_000)
    )
    assert loss_check_s(remaining(ctx), screen, seeds_beside(2, 2)) == pytest.approx(
        warmup + prefix / 500_000
    )
    assert loss_check_s(remaining(ctx), screen, seeds_beside(0, 2)) == loss_check_s(remaining(ctx), screen), (
        "still training"
    )


def test_the_100m_configs_estimate_is_minutes_for_its_prefix_not_hours_for_its_planned_run(tmp_path):
    # configs/hybrid-100m.yaml: an 8M-token prefix of a 1B-token planned run. The baseline's compiled twin
    # at ~35K tok/s and a bf16 contender at ~120K (the table), on one H200.
    ctx = eta_context(tmp_path, config="hybrid-100m.yaml")
    assert ctx.base.tokens == 1_000_000_000 and ctx.shapes.horizon.tokens == 8_028_160
    screen = [
        screened("twin", 35_000.0, 40.0, compile="default", compile_scope="blocks"),
        screened(
            "bf16", 120_000.0, 40.0, batch_size=16, precision="bf16", compile="default", lr_scaling="sqrt"
        ),
    ]
    estimate = loss_check_s(remaining(ctx), screen)
    assert estimate == pytest.approx(40.0 * CACHED_SHARE + 8_028_160 * (2 / 35_000 + 1 / 120_000))
    assert estimate < 20 * 60, "at the planned run's 1B tokens it would say ~16 hours"
    both = seeds_beside(2, 2)
    assert loss_check_s(remaining(ctx), screen, both) < 3 * 60, (
        "both seeds trained beside the screen: the contender's run"
    )


def test_after_the_screen_the_estimate_says_how_far_the_baselines_runs_beside_it_are(tmp_path, capsys):
    ctx = eta_context(tmp_path, "quality.loss_horizon=1M")
    screen = [screened("twin", 113_000.0, 96.0, compile="reduce-overhead")]
    done = [TaskRun(None, TrialSpec.of({**BASE, "seed": seed}), {}, 0.0) for seed in (1337, 1338)]
    both, one = pending(done, None), pending(done[:1], None)  # as the pipeline asks the scheduler
    assert loss_check_s(remaining(ctx), screen, both) == 0.0, "both seeds done: no loss run is left"
    prefix = ctx.shapes.horizon.tokens
    left = loss_check_s(remaining(ctx), screen, one)
    assert left == pytest.approx(96.0 * CACHED_SHARE + prefix / 113_000), "one seed left"
    assert after_screen(remaining(ctx), screen, both) == pytest.approx(remeasure_s(remaining(ctx), screen))
    said = capsys.readouterr().err
    assert "[baseline] its loss runs at 2 seeds beside the screen: done" in said
    after_screen(remaining(ctx), screen, one)
    said = capsys.readouterr().err
    assert "[baseline] its loss run beside the screen: done" in said
    assert f"loss check ~{fmt_seconds(left)}," in said, "the line says the estimate it made"


def test_a_loss_check_already_done_is_not_estimated(tmp_path, capsys):
    # Run Z: a remembered answer's confirmation said "loss check ~2m 23s" for a loss check it never ran.
    ctx = eta_context(tmp_path)
    screen = [screened("twin", 113_000.0, 96.0, compile="reduce-overhead")]
    ctx.state.finish("loss_check", [], 1.0)
    again = after_screen(remaining(ctx), screen)
    said = capsys.readouterr().err
    assert "loss check done; estimated: re-measure ~" in said and "loss check ~" not in said
    assert again == pytest.approx(remeasure_s(remaining(ctx), screen))


def test_a_cached_warmup_is_a_timed_hit_of_the_graph_or_a_tenth_of_its_cold_compile():
    ro = {"batch_size": 32, "precision": "bf16", "compile": "reduce-overhead"}
    first = screened("first", 500_000.0, 120.0, **ro, cache="miss")
    again = screened("again", 510_000.0, 9.0, **ro, lr=6e-4, cache="hit")
    assert cached_warmup(first, [first], BASE) == pytest.approx(12.0)
    assert cached_warmup(first, [first, again], BASE) == 9.0


def test_remeasure_estimate_counts_each_run_at_least_its_overhead_outside_the_window(tmp_path):
    # Launch-bound finalists' windows (30 steps of 10-20 ms) are shorter than what each run spends
    # outside them; the screen's median of that (5 s) stands for each of the re-measure's turns.
    ro = {"compile": "reduce-overhead", "precision": "bf16"}
    timed = {"wall_s": 20.0, "gate_wait_s": 1.0, "window_t0": 100.0, "window_t1": 104.0}  # 20-10-1-4 = 5 s
    fastest = [
        make_row(
            f"s{b}",
            "screen",
            {**ro, "batch_size": b},
            tokens_per_s=1e6 / b,
            warmup_s=10.0,
            step_ms_median=10.0 + b / 16,
            compile_cache_use="miss",
            **timed,
        )
        for b in (16, 32, 64)
    ]
    ctx = eta_context(tmp_path, "search.remeasure_top=3")
    runs = 3 * ctx.cfg.search.repeats + ctx.cfg.search.baseline_runs
    assert remeasure_s(remaining(ctx), fastest) == pytest.approx(runs * 5.0 + 10.0 * CACHED_SHARE)
    ctx = replace(ctx, hw=ctx.hw.model_copy(update={"gpus": 2}))
    assert remeasure_s(remaining(ctx), fastest) == pytest.approx(runs * 5.0 / 2 + 10.0 * CACHED_SHARE)


def test_remeasure_estimate_counts_the_baseline_windows_at_an_eager_screen_runs_step(tmp_path):
    # Run P (one H100): the estimate said ~32 s for a 105 s re-measure; six of its 15 windows were the
    # eager baseline's, 96-142 ms steps, counted at the winner's 23.5 ms. A screen run at the baseline's
    # batch, precision and compile mode (fused kernels, stopped early at 16,386 tok/s) gives its step.
    assert (BASE["seq_len"], BASE["timing_warmup_steps"]) == (256, 10)
    timed = {"wall_s": 14.0, "gate_wait_s": 0.0, "window_t0": 100.0, "window_t1": 101.0}  # 14-10-0-1 = 3 s
    ro = {"compile": "reduce-overhead", "precision": "bf16", "batch_size": 128}
    winner = make_row(
        "s2",
        "screen",
        ro,
        tokens_per_s=1.36e6,
        warmup_s=10.0,
        step_ms_median=23.5,
        compile_cache_use="miss",
        **timed,
    )
    eager = make_row("s4", "screen", {"kernels": "fused"}, status="stopped", tokens_per_s=16_386.5)
    other = make_row(
        "s5", "screen", {"precision": "bf16", "compile": "reduce-overhead"}, tokens_per_s=126_760.0
    )
    ctx = eta_context(tmp_path, "search.remeasure_top=1")
    s = ctx.cfg.search
    warmup = 10.0 * CACHED_SHARE
    held = s.screen_steps + 9  # the gate is held from the second step
    eager_window = held * 8 * 256 / 16_386.5
    assert eager_window > 3.0
    expected = s.repeats * max(held * 0.0235, 3.0) + s.baseline_runs * eager_window + warmup
    assert remeasure_s(remaining(ctx), [winner, eager, other]) == pytest.approx(expected)
    # without such a run the baseline's windows count at the winner's step, as before
    assert remeasure_s(remaining(ctx), [winner, other]) == pytest.approx(
        (s.repeats + s.baseline_runs) * 3.0 + warmup
    )


def test_a_phase_progress_eta_keeps_to_the_estimate_while_it_has_time_left(tmp_path, capsys):
    # Run Q's re-measure: 15 runs started together; after the first ended, their pace alone (one run per
    # ~54 s, 14 left) said 12m34s, and the phase ended 65 s later. Its estimate bounds that until it runs out.
    def eta_after_first(planned_s: float | None, elapsed: float) -> float:
        ledger = Ledger(tmp_path / f"{planned_s}-{elapsed}", "remeasure")
        progress = PhaseProgress(ledger.phase, 15, 0, ledger.best_speed(), planned_s=planned_s)
        record = LedgerRecorder(ledger, progress=progress)
        progress.started = time.time() - elapsed
        first = FakeTrial("a", 0, {"trial_id": "a", "status": "ok", "tokens_per_s": 1e6, "steps": 40})
        record.on_trial_complete(0, [first], first)
        eta = progress.eta_s
        assert eta is not None, "a finished trial's line gives the phase's ETA"
        line = capsys.readouterr().err.strip()
        assert line.endswith(f"| ETA {fmt_seconds(eta)}"), "the line says the ETA it computed"
        return eta

    assert eta_after_first(None, 39.0) == pytest.approx(39 * 14, abs=2)  # the pace alone
    assert eta_after_first(150.0, 39.0) == pytest.approx(150 - 39, abs=2)  # what the estimate has left
    assert eta_after_first(150.0, 160.0) == pytest.approx(160 * 14, abs=2)  # past the estimate: the pace
