"""Loss runs spread evenly over the GPUs: each asks for at least 1/ceil(runs / GPUs) of one."""

from __future__ import annotations

import collections
import math
import time
from types import SimpleNamespace

import pytest
import ray

from tuner.phases.loss_check import spread


def ctx(gpus: int, on_gpu: bool = True):
    return SimpleNamespace(on_gpu=on_gpu, hw=SimpleNamespace(gpus=gpus))


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
    cases = [{"batch_size": 8, "gpu_memory_fraction": s} for s in shares]
    got = [c["gpu_memory_fraction"] for c in spread(ctx(gpus), cases)]
    assert got == pytest.approx(expected)


def test_on_cpu_nothing_changes():
    cases = [{"gpu_memory_fraction": None}] * 3
    assert spread(ctx(0, on_gpu=False), cases) == cases


@ray.remote(num_cpus=0)
def _which_gpu(hold_s: float) -> int:
    time.sleep(hold_s)  # all hold their share at once, as a round's loss runs do
    return int(ray.get_gpu_ids()[0])


@pytest.mark.parametrize("runs", [3, 5])
def test_ray_places_the_spread_shares_evenly_on_two_gpus(runs):
    ray.init(num_cpus=1, num_gpus=2, include_dashboard=False, log_to_driver=False)
    try:
        cases = spread(ctx(2), [{"gpu_memory_fraction": 0.25}] * runs)
        refs = [_which_gpu.options(num_gpus=c["gpu_memory_fraction"]).remote(1.0) for c in cases]
        per_gpu = collections.Counter(ray.get(refs, timeout=60))
    finally:
        ray.shutdown()
    assert sorted(per_gpu.values()) == sorted([runs // 2, math.ceil(runs / 2)])
