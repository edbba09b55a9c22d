"""The search's estimate of its loss check, from what the screen measured (tuner/eta.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.factories import make_row
from tuner.config import SearchSection
from tuner.eta import loss_check_s

BASE = {"batch_size": 8, "precision": "fp32", "compile": "none", "lr": 3e-4, "tokens": 10_240_000}


def screened(tid: str, tps: float, warmup: float, status: str = "ok", **config):
    return make_row(tid, "screen", config, status=status, tokens_per_s=tps, warmup_s=warmup)


def test_loss_check_estimate_counts_cold_compiles_the_twin_and_the_shared_gpu():
    # Run G's screen in small: the loss check took 234 s; the estimate before counted half a warm
    # warm-up and left the baseline's slow twin out (1m58s).
    ro = {"batch_size": 32, "precision": "bf16", "compile": "reduce-overhead"}
    screen = [
        screened("first", 500_000.0, 120.0, **ro),  # compiled the graph cold
        screened("cached", 580_000.0, 8.0, **ro, lr=6e-4),  # same graph, from the cache
        screened("b64", 447_000.0, 118.0, **{**ro, "batch_size": 64}),
        screened("twin", 113_000.0, 96.0, status="stopped", compile="reduce-overhead"),
        screened("slow", 40_000.0, 2.0, status="stopped", batch_size=32),
    ]
    ctx = SimpleNamespace(base=BASE, cfg=SimpleNamespace(search=SearchSection(remeasure_top=3)))
    ctx.hw = SimpleNamespace(gpus=1)
    tokens = BASE["tokens"]
    work = tokens * (1 / 580_000 + 1 / 500_000 + 1 / 447_000 + 1 / 113_000)
    assert loss_check_s(ctx, screen) == pytest.approx(120.0 + work)
    ctx.hw.gpus = 4  # the runs spread over four GPUs: the twin's run is the longest
    assert loss_check_s(ctx, screen) == pytest.approx(120.0 + tokens / 113_000)
