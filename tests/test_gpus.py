"""The GPUs side by side (tuner/telemetry/gpus.py): when each phase ran, each GPU's use from the samplers' answers, and
whether the GPUs of a host time a config alike, by the rule the selection ties configs with."""

from __future__ import annotations

import pytest

from tests.factories import make_row
from tuner.decide.select import pick_winner
from tuner.state.gpu_records import POOLED, SEARCH
from tuner.state.records import Finalist
from tuner.telemetry.gpus import compare, gpu_population, gpu_usage, phase_spans

NODE = "7088e154e66767fe6807b1254f2e09d538e0af71761592aeee82b61b"


def remeasured(fid: str, speeds: dict[int, list[float]], node: str = NODE) -> list:
    """The re-measure runs of finalist `fid`: GPU index -> tok/s of its runs there."""
    return [
        make_row(f"{fid}/{gpu}-{n}", "remeasure", finalist=fid, tokens_per_s=tps, gpu=gpu, node_id=node)
        for gpu, runs in speeds.items()
        for n, tps in enumerate(runs)
    ]


def test_phases_end_with_their_last_timed_window_and_the_probe_where_the_screen_starts():
    timings = {"hardware": 4.0, "probe": 30.0, "screen": 600.0, "loss_check_0": 200.0, "loss_check": 200.0}
    timings |= {"remeasure": 100.0, "total": 934.0}
    rows = [
        make_row("screen-0", "screen", window_t0=1_100.0, window_t1=1_200.0),
        make_row("screen-1", "screen", window_t0=1_500.0, window_t1=1_600.0),
        make_row("baseline", "baseline", window_t1=1_810.0),  # the baseline's loss run, in round 0
        make_row("loss_check_0-0", "loss_check_0", window_t1=1_790.0),
        make_row("screen-2", "screen", status="oom"),  # no window: no end
        make_row("remeasure-0", "remeasure", window_t1=1_905.0),
    ]
    spans = phase_spans(timings, rows)
    assert spans == {
        "probe": (970.0, 1_000.0),
        "screen": (1_000.0, 1_600.0),
        "loss_check": (1_610.0, 1_810.0),
        "remeasure": (1_805.0, 1_905.0),
        SEARCH: (970.0, 1_905.0),
    }
    assert phase_spans(timings, []) == {}  # nothing timed: no span to ask the samplers about


def test_gpu_usage_keeps_every_gpu_of_every_node_that_answered():
    stats = {"span_s": 10.0, "samples": 50, "covered_s": 9.8, "util_mean": 60.0, "util_median": 62.0}
    answers = [
        {"available": True, "node_id": NODE, "gpus": [{"gpu": g, "name": "H100", "spans": {SEARCH: stats}} for g in (0, 1)]},
        {"available": False, "node_id": "cpu-node", "reason": "NVML sees no GPUs", "gpus": []},
    ]  # fmt: skip
    usage = gpu_usage(answers)
    assert [(u.node_id, u.gpu) for u in usage] == [(NODE, 0), (NODE, 1)]
    assert usage[1].spans[SEARCH].util_median == 62.0 and usage[1].spans[SEARCH].mem_used_mean_mb is None


def test_gpu_usage_keeps_only_the_gpus_trials_ran_on():
    # a search under CUDA_VISIBLE_DEVICES=1: the sampler reads GPUs 0-2, the trials ran on GPU 1 only
    stats = {"span_s": 10.0, "samples": 50, "covered_s": 9.8, "util_mean": 60.0, "util_median": 62.0}
    answers = [
        {"available": True, "node_id": NODE, "gpus": [{"gpu": g, "spans": {SEARCH: stats}} for g in range(3)]}
    ]
    rows = [
        make_row("screen-0", "screen", gpu=1, node_id=NODE),
        make_row("screen-1", "screen", gpu=1, node_id=NODE),
    ]
    assert [u.gpu for u in gpu_usage(answers, rows)] == [1]
    assert [u.gpu for u in gpu_usage(answers, [make_row("cpu-run", "screen")])] == [
        0,
        1,
        2,
    ]  # no GPU known: all


def test_one_gpu_or_cpu_runs_have_no_population_to_compare():
    assert gpu_population(remeasured("baseline", {0: [100.0, 101.0, 99.0]})) == []
    cpu = [make_row(f"r{n}", "remeasure", finalist="baseline", tokens_per_s=100.0) for n in range(3)]
    assert gpu_population(cpu) == []


def test_gpus_within_the_noise_are_one_population():
    rows = remeasured("baseline", {0: [100.0, 102.0], 1: [101.0, 103.0]})
    rows += remeasured("screen-3", {0: [200.0, 204.0], 1: [203.0, 201.0]})
    (host,) = gpu_population(rows)
    assert host.node_id == NODE and host.gpus == [0, 1] and host.verdict == "one population"
    base = host.configs[0]
    assert [(s.gpu, s.median) for s in base.gpus] == [(0, 101.0), (1, 102.0)]
    assert base.gap == pytest.approx(1 / 101) and base.noise == pytest.approx(2 / 101)
    assert host.pooled.config_id == POOLED and len(host.pooled.gpus[0].runs) == 4


def test_a_gpu_faster_beyond_the_noise_differs():
    rows = remeasured("baseline", {0: [100.0, 101.0, 100.5], 1: [105.0, 106.0]})
    rows += remeasured("screen-3", {0: [200.0, 201.0], 1: [210.0, 211.0, 209.0]})
    (host,) = gpu_population(rows)
    assert host.verdict == "differ" and all(c.verdict == "differ" for c in host.configs)
    base = host.configs[0]
    assert base.gap == pytest.approx(105.5 / 100.5 - 1) and base.noise == pytest.approx(1.0 / 100.5)


def test_a_gpu_with_one_run_has_no_range_to_judge_by():
    (host,) = gpu_population(remeasured("baseline", {0: [100.0, 101.0], 1: [108.0]}))
    assert host.verdict == "too few runs" and host.pooled.noise is None
    assert host.pooled.gap == pytest.approx(108.0 / 100.5 - 1)


def test_hosts_are_compared_apart():
    rows = remeasured("baseline", {0: [100.0, 101.0], 1: [100.5, 101.5]}, node="a" * 56)
    rows += remeasured("baseline", {0: [150.0, 151.0]}, node="b" * 56)  # one GPU there: nothing to compare
    assert [h.node_id for h in gpu_population(rows)] == ["a" * 56]


@pytest.mark.parametrize(
    "gpu0, gpu1",
    [
        ([100.0, 102.0, 101.0], [101.5, 103.0]),
        ([100.0, 101.0], [101.2, 102.0]),
        ([100.0, 101.0], [99.0, 98.5]),
    ],
)
def test_the_verdict_is_the_selections_tie_rule(gpu0, gpu1):
    """Two GPUs differ exactly when pick_winner, given the config on each as two finalists, calls them
    different (their ranges do not overlap) rather than tied."""
    verdict = compare("x", {0: gpu0, 1: gpu1}).verdict
    finalists = [Finalist(id=f"gpu{g}", runs=runs, feasible=True) for g, runs in enumerate((gpu0, gpu1))]
    rejected = pick_winner(finalists, {}).rejected
    apart = any(why.startswith("slower") for why in rejected.values())
    assert (verdict == "differ") == apart and verdict != "too few runs"
