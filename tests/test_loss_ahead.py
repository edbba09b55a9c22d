"""Loss runs ahead of the loss check (planned by tuner/phases/loss_check.py:start_ahead, run by
tuner/runs/ahead.py:RunsAhead): as the screen finds its fastest candidates, their full-budget loss runs train
beside it on the GPUs, and a round takes their rows instead of training them. Real Ray tasks on a local cluster that advertises two GPUs it does not have; the runs train
the smoke model on the CPU, through the same trainable the search uses."""

from __future__ import annotations

from dataclasses import replace

from tests.factories import SMALL_SMOKE_MODEL, make_row, search_context
from tests.test_loss_placement import rounds_without_training
from tuner.config import load_search_config
from tuner.context import SearchContext
from tuner.decide.select import loss_check_candidates
from tuner.phases import loss_check
from tuner.pipeline import loss_check_inputs, run_scheduler
from tuner.runs.ahead import RunsAhead
from tuner.runs.ledger import Ledger
from tuner.state.hardware import Hardware
from tuner.state.records import AHEAD_PHASE
from tuner.state.search_state import State

SMOKE_SHORT = ["train.tokens=16384", "train.eval_tokens=2048", "search.loss_check_top=2", *SMALL_SMOKE_MODEL]


def started(ahead: RunsAhead) -> list[dict]:
    """The knobs of the loss runs it started ahead (or found in its ledger), in the order it started them."""
    return [run.knobs for run in ahead.pending()]


def smoke_context(tmp_path) -> SearchContext:
    cfg = load_search_config("configs/smoke.yaml", SMOKE_SHORT)
    hw = Hardware(gpus=2, gpu_mem_mb=81_559)
    return SearchContext(
        cfg=cfg, out=tmp_path, base=cfg.train, hw=hw, cluster_cpus=4, state=State(tmp_path), command=""
    )


def test_the_fastest_candidates_train_ahead_and_a_round_takes_their_rows(
    tmp_path, monkeypatch, two_fake_gpus
):
    ctx = smoke_context(tmp_path)
    checking = loss_check_inputs(ctx, run_scheduler(ctx))  # one scheduler for the runs ahead and the rounds
    ahead = loss_check.start_ahead(checking)
    assert ahead is not None and ahead.limit == 4 and ahead.at_once == 2
    screen = [
        # its screen run peaked high: a round would give its loss run a whole GPU, a run ahead takes a place
        make_row("screen-0", config={"batch_size": 32}, tokens_per_s=3_000.0, peak_mem_mb=50_000.0),
        make_row("screen-1", config={"lr": 6e-3}, tokens_per_s=2_000.0),
        make_row("screen-2", config={"lr": 1e-3, "batch_size": 8}, tokens_per_s=1_000.0),
        # the baseline's loss (its group passes with it: were it faster, none of the others would be checked)
        make_row("screen-3", config={"compile": "default"}, tokens_per_s=900.0),
        # the baseline itself, a start point (tuner/space/recipe.py): what "slower than the baseline" is told by
        make_row("screen-4", config={}, tokens_per_s=500.0),
    ]
    ahead.consider(screen[:1])  # as the screen's first trial finishes: none ahead before the baseline's row
    assert started(ahead) == []
    ahead.consider(screen)  # then the rest: the top 2 that need a loss run of their own
    # the top 2 that need a loss run of their own; the spare (screen-2) waits: one run ahead per GPU at a
    # time; the baseline's own loss run stands for screen-3
    assert started(ahead) == [screen[0].config, screen[1].config]
    trained = rounds_without_training(monkeypatch)  # the rounds' own runs reach val loss 1.5 at once
    rows = loss_check.check_losses(checking, screen, None, ahead).rows
    assert trained[0] == [None], "round 0 trained only the baseline: its candidates had run ahead"
    by_screen = {r.screen_id: r for r in rows[1:]}
    for sid in ("screen-0", "screen-1"):
        row = by_screen[sid]
        assert row.phase == AHEAD_PHASE and row.status == "ok" and row.val_loss is not None
        assert row.gate_wait_s is not None, "it ran beside the screen, at its GPU's gate"
        assert row.train["tokens"] == 16_384, "a full-budget loss run, not a screen run"
        assert row.train["gpu_memory_fraction"] == 0.5, "one of the screen's two places on its GPU"
    assert ctx.placement.loss_share(50_000.0) == 1.0
    # the smoke model's short runs end far above the fake rounds' 1.5: both fail the loss limit, and a later
    # round trains the next candidate itself
    assert trained[1:] == [["screen-2"]]
    assert len(Ledger(tmp_path, AHEAD_PHASE).rows()) == 2
    again = loss_check_inputs(ctx, run_scheduler(ctx))  # a resumed search: a new driver, a new scheduler
    resumed = loss_check.start_ahead(again)  # reads the ledger
    assert started(resumed) == [screen[0].config, screen[1].config]
    pick = {c.id: c for c in loss_check_candidates(screen, ctx.base.model_dump(), 4)}["screen-0"]
    assert resumed.loss_row(loss_check._request(again, pick)).screen_id == "screen-0"


def test_one_spare_trains_ahead_and_runs_no_round_asked_for_are_stopped(tmp_path, two_fake_gpus):
    ctx = smoke_context(tmp_path)
    ahead = replace(loss_check.start_ahead(loss_check_inputs(ctx, run_scheduler(ctx))), at_once=4)
    screen = [
        make_row(f"screen-{i}", config={"lr": lr}, tokens_per_s=3_000.0 - i)
        for i, lr in enumerate((1e-3, 2e-3, 4e-3, 6e-3))
    ]
    ahead.consider([*screen, make_row("screen-4", config={}, tokens_per_s=1_000.0)])  # the baseline too
    # loss_check_top is 2: those two and one spare, for when one of them fails the loss limit
    assert started(ahead) == [row.config for row in screen[:3]]
    assert ahead.training() == 3
    ahead.cancel_rest()
    assert ahead.training() == 0 and not Ledger(tmp_path, AHEAD_PHASE).rows()


def test_no_runs_ahead_on_cpus(tmp_path):
    cfg = load_search_config("configs/smoke.yaml", SMOKE_SHORT)
    ctx = search_context(cfg, tmp_path, cluster_cpus=2)
    assert loss_check.start_ahead(loss_check_inputs(ctx, run_scheduler(ctx))) is None
