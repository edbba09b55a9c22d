"""Loss runs spread evenly over the GPUs (each asks for at least 1/ceil(runs / GPUs) of one), and so do the
re-measure's runs, all at once where the CPUs allow."""

from __future__ import annotations

import collections
import math
import time
from pathlib import Path

import pytest
import ray

from tests.factories import make_row
from trainables.spec import TrialSpec
from tuner.config import load_search_config
from tuner.context import SearchContext
from tuner.measure import baseline
from tuner.phases import loss_check
from tuner.pipeline import loss_check_inputs, run_scheduler
from tuner.runs.placement import spread
from tuner.runs.tasks import TaskRun
from tuner.runs.tune import round_robin
from tuner.state.hardware import Hardware, ProbedBatch
from tuner.state.search_state import State


@pytest.mark.parametrize(
    ("gpus", "shares", "expected"),
    [
        (2, [0.25] * 5, [1 / 3] * 5),  # 3 + 2 instead of 4 + 1
        (2, [0.25] * 4, [0.5] * 4),
        (1, [0.25] * 4, [0.25] * 4),  # one GPU: the configured share stands
        (2, [0.25, 1.0, 0.25], [0.5, 1.0, 0.5]),  # a memory-hungry run keeps its larger share
        (4, [0.25] * 2, [1.0] * 2),
    ],
)
def test_each_run_gets_at_least_its_even_part_of_the_gpus(gpus, shares, expected):
    cases = [TrialSpec.of({"batch_size": 8}).with_placement(gpu_share=s) for s in shares]
    got = [c.placement.gpu_share for c in spread(cases, gpus)]
    assert got == pytest.approx(expected)


def test_a_baseline_run_still_training_beside_the_round_counts_as_one_of_its_runs():
    # on 2 H200s: four half-GPU runs and the baseline's sixth of GPU 0: the fourth waited for a place
    cases = [TrialSpec.of({"batch_size": 128}).with_placement(gpu_share=0.25)] * 4
    got = [c.placement.gpu_share for c in spread(cases, 2, beside=1)]
    assert got == pytest.approx([1 / 3] * 4)  # GPU 0: 1/6 + 2/3; GPU 1: the other two


def test_on_cpu_nothing_changes():
    cases = [TrialSpec.of({})] * 3
    assert spread(cases, 0) == cases


def test_a_loss_rounds_run_asks_ray_for_the_gpu_share_its_spec_is_placed_on(tmp_path):
    resources = search_context(tmp_path, gpus=2, cpus=16).placement.loss_round().resources
    spec = TrialSpec.of({"batch_size": 8}).labelled(case=0, repeat=0)
    assert resources(spec.with_placement(gpu_share=0.25).as_tune())["gpu"] == 0.25
    assert resources(spec.as_tune())["gpu"] == 1.0, "placed nowhere in particular: a whole GPU"


@ray.remote(num_cpus=0)
def _which_gpu(hold_s: float) -> int:
    time.sleep(hold_s)  # all hold their share at once, as a round's loss runs do
    return int(ray.get_gpu_ids()[0])


@pytest.fixture(scope="module")
def fake_gpus():
    """`fake_gpus(n)`: a local Ray that advertises n GPUs it does not have (16 CPUs per GPU), started once per
    n for the module, not once per test: Ray's start is most of these tests. Every task a test starts has
    returned (ray.get) before the next test asks, so each finds all the GPUs free."""
    started: list[int] = []

    def start(gpus: int) -> None:
        if started[-1:] != [gpus]:
            ray.shutdown()
            ray.init(
                address="local",
                num_cpus=16 * gpus,
                num_gpus=gpus,
                include_dashboard=False,
                log_to_driver=False,
            )
            started.append(gpus)

    yield start
    ray.shutdown()


@pytest.mark.parametrize("runs", [3, 5])
def test_ray_places_the_spread_shares_evenly_on_two_gpus(runs, fake_gpus):
    fake_gpus(2)
    cases = spread([TrialSpec.of({}).with_placement(gpu_share=0.25)] * runs, 2)
    refs = [_which_gpu.options(num_gpus=c.placement.gpu_share).remote(1.0) for c in cases]
    per_gpu = collections.Counter(ray.get(refs, timeout=60))
    assert sorted(per_gpu.values()) == sorted([runs // 2, math.ceil(runs / 2)])


# --- the re-measure: every run at once where CPUs and memory allow, each GPU an even part ---------------------

ROOT = Path(__file__).resolve().parents[1]


def search_context(tmp_path, gpus: int, cpus: int, gpu_mem_mb: int = 81_559) -> SearchContext:
    cfg = load_search_config(str(ROOT / "configs" / "default.yaml"), [])
    hw = Hardware(gpus=gpus, gpu_mem_mb=gpu_mem_mb)
    return SearchContext(
        cfg=cfg, out=tmp_path, base=cfg.train, hw=hw, cluster_cpus=cpus, state=State(tmp_path), command=""
    )


def trial(case: int, batch: int = 8) -> dict:
    return TrialSpec.of({"batch_size": batch, "precision": "bf16"}).labelled(case=case, repeat=0).as_tune()


def test_one_gpu_warms_all_fifteen_remeasure_runs_up_at_once(tmp_path):
    # Run J's re-measure on a 16-core H100: the baseline 6 times, three finalists 3 times each.
    ctx = search_context(tmp_path, gpus=1, cpus=16)
    placement = ctx.placement.remeasure([6, 3, 3, 3], [None, 3_839.0, 7_858.0, 1_200.0])
    assert placement.concurrent == 15  # their gate policy is their role's: Role.REMEASURE.timing_gate
    assert placement.resources(trial(1, 128)) == {"cpu": 1, "gpu": pytest.approx(1 / 15)}
    # 7.9 GB with 25% headroom is 0.12 of 80 GB: two fifteenths
    assert placement.resources(trial(2, 128))["gpu"] == pytest.approx(2 / 15)
    ctx = ctx.with_probed(
        {"bf16": ProbedBatch(batch=512)}
    )  # the unscreened baseline: its batch against the probe's
    assert placement.resources(trial(0, 8))["gpu"] == pytest.approx(1 / 15)


def test_runs_that_fit_one_gpu_together_take_even_shares_and_all_start_at_once(tmp_path):
    # Run N on one H200 (143,771 MiB): shares rounded up to fifteenths gave the torch fp16 finalist (7.9 GB)
    # 2/15 and summed to 18/15, so three baseline runs waited ~55 s for a place. The 15 runs need at most
    # 0.47 of the GPU together: each takes 1/15 and all warm up at once.
    ctx = search_context(tmp_path, gpus=1, cpus=64, gpu_mem_mb=143_771)
    ctx = ctx.with_probed(
        {"fp32": ProbedBatch(batch=512, peak_mb=60_000.0)}
    )  # the baseline's batch 8: ~0.9 GB
    peaks, asked = [None, 3_839.0, 3_839.0, 7_858.0], [6, 3, 3, 3]
    placement = ctx.placement.remeasure(asked, peaks)
    shares = [
        placement.resources(trial(case))["gpu"] for case, count in enumerate(asked) for _ in range(count)
    ]
    assert shares == [pytest.approx(1 / 15)] * 15 and sum(shares) == pytest.approx(1.0)
    # where the largest 15 would not fit one GPU together, a case's share follows its peak again
    big = ctx.placement.remeasure(asked, [None, 3_839.0, 3_839.0, 40_000.0])
    assert big.resources(trial(3))["gpu"] == pytest.approx(6 / 15)
    ctx = ctx.with_probed({})  # the baseline's memory unknown: no even shares on a guess
    assert ctx.placement.remeasure(asked, peaks).resources(trial(3))["gpu"] == pytest.approx(2 / 15)


def test_four_gpus_take_four_remeasure_runs_each(tmp_path):
    ctx = search_context(tmp_path, gpus=4, cpus=64)
    placement = ctx.placement.remeasure([6, 9], [None, 3_839.0])
    assert placement.concurrent == 16
    assert placement.resources(trial(1, 128)) == {"cpu": 2, "gpu": pytest.approx(1 / 4)}


def test_the_remeasure_waits_in_waves_only_when_the_cpus_run_out(tmp_path):
    ctx = search_context(tmp_path, gpus=1, cpus=8)
    assert ctx.placement.remeasure([15], [None]).concurrent == 8


@pytest.mark.parametrize("gpus", [2, 4])
def test_ray_spreads_each_finalists_repeats_over_several_gpus(tmp_path, gpus, fake_gpus):
    counts = [6, 3, 3, 3]  # the baseline, three finalists
    ctx = search_context(tmp_path, gpus=gpus, cpus=16 * gpus)
    placement = ctx.placement.remeasure(counts, [None, 3_839.0, 3_839.0, 3_839.0])
    fake_gpus(gpus)
    order = round_robin(counts)  # the order run_cases launches them in
    refs = [
        _which_gpu.options(num_gpus=placement.resources(trial(case))["gpu"]).remote(1.0) for case, _ in order
    ]
    where = ray.get(refs, timeout=60)
    for case in range(len(counts)):
        assert len({g for (c, _), g in zip(order, where) if c == case}) > 1, f"case {case} ran on one GPU"
    assert set(where) == set(range(gpus)), "every GPU re-measured"


def test_a_screen_runs_share_follows_the_memory_the_probe_measured(tmp_path):
    # Run K (4x H200, 141 GB each): everything up to batch 512 fitted, so batch / bound gave batch 512 a
    # whole GPU and batch 128 two sixths; the eager step at 512 peaked near 60 GB.
    ctx = search_context(tmp_path, gpus=4, cpus=64, gpu_mem_mb=143_771)
    ctx = ctx.with_probed({"bf16": ProbedBatch(batch=512)})  # a state.json from before the peak was kept
    share = ctx.placement.speed().resources  # the policy of the cluster as the probe left it
    assert share(trial(0, 512))["gpu"] == 1.0 and share(trial(0, 128))["gpu"] == pytest.approx(2 / 6)
    ctx = ctx.with_probed({"bf16": ProbedBatch(batch=512, peak_mb=60_000.0)})
    share = ctx.placement.speed().resources
    assert share(trial(0, 512))["gpu"] == pytest.approx(4 / 6)  # 75 GB of 141 with headroom
    assert share(trial(0, 128))["gpu"] == pytest.approx(1 / 6)
    assert share(trial(0, 256))["gpu"] == pytest.approx(2 / 6)
    # batch 512 run as micro-batches of 128 holds one micro-batch's activations: 128's share
    pieces = TrialSpec.of({"batch_size": 512, "micro_batch": 128, "precision": "bf16"}).labelled(
        case=0, repeat=0
    )
    assert share(pieces.as_tune())["gpu"] == pytest.approx(1 / 6)


def test_older_state_files_keep_a_bare_batch_per_precision():
    assert ProbedBatch.model_validate(256) == ProbedBatch(batch=256, peak_mb=None)


# --- which candidates the loss check trains ---------------------------------------------------------------


def test_the_baselines_group_does_not_use_up_a_top_of_one(tmp_path, monkeypatch):
    # The Hugging Face example on an H200 (loss_check_top 1): a twin of the baseline (speed knobs only)
    # passed without a run and filled the top; batch 32, screened 1.86x faster, was never checked.
    ctx = search_context(tmp_path, gpus=0, cpus=4)
    ctx.cfg.search.loss_check_top = 1
    screen = [
        make_row("screen-4", config={"batch_size": 32}, tokens_per_s=294_294.0),
        make_row("screen-0", config={"fused_adamw": True}, tokens_per_s=177_614.0),
    ]
    trained = rounds_without_training(monkeypatch)
    rows = loss_check.check_losses(loss_check_inputs(ctx, run_scheduler(ctx)), screen).rows
    assert trained == [[None, "screen-4"]]  # round 0: the baseline and the fastest of a loss of its own
    assert [r.feasible for r in rows] == [True, True]


def rounds_without_training(monkeypatch) -> list[list]:
    """Loss-check rounds whose runs all reach a loss within the loss limit at once; records their picks."""
    trained: list[list] = []

    def fake_round(inputs, round_no, cases, beside=0):
        trained.append([c.labels.screen_id for c in cases])
        return [make_row(f"loss-{round_no}-{n}", "loss_check_0", val_loss=1.5, train=c.train.model_dump())
                for n, c in enumerate(cases)]  # fmt: skip

    monkeypatch.setattr(loss_check, "_round", fake_round)
    return trained


def test_a_baseline_trained_beside_the_screen_needs_no_twin_of_its_own(tmp_path, monkeypatch):
    # The start point it took its execution from failed in the screen: "no screened config shares the
    # baseline's loss knobs: its loss run trains as configured" would be untrue, as it already trained.
    ctx = search_context(tmp_path, gpus=0, cpus=4)
    point = {"compile": "reduce-overhead"}
    screen = [
        make_row("screen-0", config=point, status="error"),
        make_row("screen-1", config={"batch_size": 32}, tokens_per_s=1_000.0),
    ]
    beside = make_row("beside", "loss_check_beside", val_loss=1.5, train={**ctx.base.model_dump(), **point})
    monkeypatch.setattr(baseline, "beside_row", lambda runs, run, base, notice: beside)
    trained = rounds_without_training(monkeypatch)
    rows = loss_check.check_losses(
        loss_check_inputs(ctx, run_scheduler(ctx)), screen, TaskRun(None, TrialSpec.of({}), point, 0.0)
    ).rows
    assert (
        trained == [["screen-1"]]
        and rows[0].id == "baseline"
        and rows[0].execution["compile"] == "reduce-overhead"
    )
    assert not any("shares the baseline's loss knobs" in n for n in ctx.notices), ctx.notices
