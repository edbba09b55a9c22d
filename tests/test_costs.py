"""What the planned run costs: cold warm-ups per compiled graph and break-even against eager (tuner/decide/costs.py)."""

from __future__ import annotations

import pytest

from tests.factories import make_row
from tuner.decide.costs import break_even, break_even_tokens, cold_warmup, warm_warmup, warmups_beside
from tuner.state.records import BASELINE_ID, Finalist

BASE = {"batch_size": 8, "precision": "fp32", "compile": "none", "kernels": "torch", "lr": 3e-4}
RO32 = {"batch_size": 32, "precision": "bf16", "compile": "reduce-overhead"}


def screened(tid: str, config: dict, tps: float, warmup: float, feasible: bool | None = True):
    train = {**BASE, **config}
    return make_row(tid, "screen", config, train=train, tokens_per_s=tps, warmup_s=warmup, feasible=feasible)


def test_cold_warm_up_is_the_longest_screen_run_of_the_same_graph():
    # Run G (H200): screen-3 compiled batch 32 bf16 CUDA graphs in 120 s; screen-13 (another lr and loader,
    # the same graph) found it cached and warmed up in 7.7 s. Its cold figure is screen-3's.
    first = screened("screen-3", RO32, 501_513.0, 119.9)
    cached = screened("screen-13", {**RO32, "lr": 6e-4, "loader": "device"}, 579_907.0, 7.7)
    other_graph = screened("screen-2", {**RO32, "batch_size": 64}, 447_001.0, 200.0)
    screen = [first, cached, other_graph]
    assert cold_warmup(cached, screen, BASE) == 119.9
    assert cold_warmup(first, screen, BASE) == 119.9
    assert cold_warmup(other_graph, screen, BASE) == 200.0
    # Precision is part of the graph: the same batch and mode in fp32 is a different compile.
    fp32 = screened("fp32", {**RO32, "precision": "fp32"}, 100_000.0, 9.0)
    assert cold_warmup(fp32, [*screen, fp32], BASE) == 9.0


def test_warm_warm_up_is_the_shortest_cache_hit_of_the_graph_as_runs_side_by_side_only_add_time():
    # The one-GPU search on a 4x H200 machine: 15 re-measure runs warming up at once took 22-23 s for the
    # fused batch-128 graph, which a screen run (another lr) had found in the cache in 10.7 s.
    fused = {"batch_size": 128, "precision": "bf16", "compile": "reduce-overhead", "kernels": "fused"}
    hit = screened("screen-10", {**fused, "lr": 6e-4}, 1_390_485.0, 10.687)
    hit.compile_cache_use = "hit"
    cold = screened("screen-3", fused, 1_396_538.0, 93.4)
    other = screened("screen-8", {**fused, "kernels": "torch", "precision": "fp16"}, 831_866.0, 9.9)
    other.compile_cache_use = "hit"
    rows = [
        make_row(f"remeasure-{i}", "remeasure", fused, warmup_s=w) for i, w in enumerate((23.3, 22.3, 22.7))
    ]
    assert warm_warmup(rows, [cold, hit, other], BASE).seconds == 10.7  # not 9.9 (another graph) nor 93.4
    assert warm_warmup(rows, [cold, other], BASE).seconds == 22.3  # no hit of its graph: its own shortest
    assert warm_warmup([], [], BASE) is None


# Run O's one-GPU re-measure (one H100, 2026-11-27): (id, case, window start relative, warm-up, gate wait).
# The 15 runs started at once; the fused finalist's (case 1) took 23-25 s to warm up, 10 s on four GPUs.
RUN_O = [
    ("remeasure-0", 3, 0.0, 17.51, 0.0),
    ("remeasure-1", 3, 0.9, 23.689, 2.712),
    ("remeasure-2", 3, 1.7, 25.577, 3.896),
    ("remeasure-3", 1, 2.7, 24.684, 4.91),
    ("remeasure-4", 1, 4.1, 25.48, 6.954),
    ("remeasure-5", 1, 5.7, 23.243, 10.925),
    ("remeasure-6", 2, 7.8, 12.979, 29.959),
    ("remeasure-7", 2, 10.2, 8.526, 33.837),
    ("remeasure-8", 2, 12.5, 9.008, 37.713),
    *[
        (f"remeasure-{9 + i}", 0, t, 2.2, w)
        for i, (t, w) in enumerate(((15.2, 47.6), (20.7, 53.5), (26.2, 60.7)))
    ],
]


def run_o_rows(node: str = "n1") -> list:
    return [
        make_row(
            rid,
            "remeasure",
            {},
            case=case,
            warmup_s=warm,
            gate_wait_s=wait,
            window_t0=1000.0 + t0,
            node_id=node,
        )
        for rid, case, t0, warm, wait in RUN_O
    ]


def test_a_warm_up_counts_the_runs_that_warmed_up_beside_it_on_its_node():
    rows = run_o_rows()
    fused = [r for r in rows if r.case == 1]
    warm = warm_warmup(fused, [], BASE, rows)
    assert warm.seconds == 23.2  # its shortest
    # the 8 other finalists' runs overlapped it; the eager baseline's 2 s warm-ups ended ~30 s before
    assert warm.beside == 8
    # the loss check's run of the graph found it cached and warmed up beside 2 others in 17.5 s
    loss_run = make_row(
        "loss_check_0-1", "loss_check_0", {}, warmup_s=17.5, gate_wait_s=0.0, window_t0=900.0, node_id="n1"
    )
    loss_run.compile_cache_use = "hit"
    assert warm_warmup(fused, [loss_run], BASE, [*rows, loss_run]).seconds == 17.5
    # runs on another node do not count, nor does a run without a timed window
    elsewhere = run_o_rows("n2")
    assert warmups_beside(fused[2], [fused[2], *elsewhere]) == 0
    assert warmups_beside(make_row("x", "remeasure", {}, warmup_s=3.0), rows) is None
    # one at a time (a CPU search's re-measure): each run warmed up alone
    alone = [
        make_row(f"r{i}", "remeasure", {}, warmup_s=5.0, gate_wait_s=0.0, window_t0=100.0 + 10 * i)
        for i in range(3)
    ]
    assert [warmups_beside(r, alone) for r in alone] == [0, 0, 0]


def baseline_finalist(runs: list[float], warmup: float = 2.0) -> Finalist:
    return Finalist(id=BASELINE_ID, runs=runs, val_loss=1.5, feasible=True, warmup_s=warmup)


def test_break_even_weighs_compiled_modes_against_the_baseline_when_no_eager_config_passed():
    # Run G's screen: every eager config was stopped early (no loss verdict), so break-even had no eager
    # reference and the report showed none; the eager baseline, re-measured 6 times, is one.
    screen = [
        screened("screen-3", RO32, 501_513.0, 119.9),
        screened("screen-13", {**RO32, "lr": 6e-4}, 579_907.0, 7.7),
        screened("eager-stopped", {"batch_size": 32, "precision": "bf16"}, 42_505.0, 2.0, feasible=None),
    ]
    finalists = [
        baseline_finalist([14_812.0, 12_337.0, 14_316.0, 13_872.0, 13_682.0, 13_056.0]),
        Finalist(id="screen-13", config={**RO32, "lr": 6e-4}, runs=[471_575.0], feasible=True, warmup_s=8.0),
    ]
    (row,) = break_even(screen, finalists, BASE)
    assert (row.compile, row.config_id, row.versus_id) == ("reduce-overhead", "screen-13", BASELINE_ID)
    assert row.versus_tokens_per_s == pytest.approx(13_777.0)
    assert (row.warmup_cold_s, row.warmup_warm_s) == (119.9, 8.0)
    assert row.tokens_cold == break_even_tokens(119.9, 579_907.0, 2.0, 13_777.0)
    assert row.tokens_warm == break_even_tokens(8.0, 579_907.0, 2.0, 13_777.0)
    assert 1.5e6 < row.tokens_cold < 1.8e6 and row.tokens_warm < 1e5
    # A compiled baseline is no eager reference, and without one there is no break-even to state.
    assert break_even(screen, finalists, {**BASE, "compile": "default"}) == []


def test_break_even_prefers_a_feasible_eager_screen_config_over_the_baseline():
    screen = [
        screened("ro", RO32, 500_000.0, 100.0),
        screened("eager", {"batch_size": 64, "precision": "bf16"}, 60_000.0, 3.0),
    ]
    finalists = [baseline_finalist([14_000.0]), Finalist(id="ro", runs=[480_000.0], warmup_s=8.0)]
    (row,) = break_even(screen, finalists, BASE)
    assert (row.versus_id, row.versus_tokens_per_s) == ("eager", 60_000.0)
    assert row.tokens_cold == break_even_tokens(100.0, 500_000.0, 3.0, 60_000.0)


def test_break_even_is_given_per_compile_scope_so_the_report_says_what_each_scope_cost():
    # Run T (H200): the fused batch-256 graph compiled block by block in ~55 s; the whole model ~100 s for
    # ~3% more speed. Each scope of a mode is its own row, against the same eager reference.
    screen = [
        screened("blocks", {**RO32, "compile_scope": "blocks"}, 490_000.0, 55.0),
        screened("model", {**RO32, "compile_scope": "model"}, 505_000.0, 100.0),
        screened("eager", {"batch_size": 64, "precision": "bf16"}, 60_000.0, 3.0),
    ]
    finalists = [baseline_finalist([14_000.0])]
    rows = break_even(screen, finalists, BASE)
    assert [(r.compile, r.compile_scope, r.config_id) for r in rows] == [
        ("reduce-overhead", "blocks", "blocks"),
        ("reduce-overhead", "model", "model"),
    ]
    blocks, model = rows
    assert blocks.tokens_cold < model.tokens_cold  # the shorter compile pays for itself sooner
    assert {r.versus_id for r in rows} == {"eager"}
