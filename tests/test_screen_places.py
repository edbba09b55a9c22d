"""A screen run that needs a larger share of a GPU gets one: smaller proposals do not take every share that
finishing runs free while it waits (run R: the batch-256 start point never started on one H100).

Real Ray Tune trials of the toy workload on a local cluster advertising one GPU (fake: the trials train on the
CPU), with a Ray task holding a quarter of it as the baseline's loss run beside the screen does."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import ray
from ray.tune.search import Searcher
from toy_workload import TOY

from trainables.spec import TrialSpec
from tuner.runner import Placement, run_proposals

TESTS = Path(__file__).resolve().parent
BIG = 32  # the batch whose runs need three quarters of the GPU


class Listed(Searcher):
    """Proposes the given configs in order (the screen's start points come first in the same way)."""

    def __init__(self, configs: list[dict]):
        super().__init__(metric="tokens_per_s", mode="max")
        self.configs = list(configs)

    def suggest(self, trial_id: str) -> dict | None:
        return self.configs.pop(0) if self.configs else Searcher.FINISHED

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        pass


@pytest.fixture
def one_fake_gpu(monkeypatch):
    monkeypatch.chdir(TESTS)  # workers get the driver's cwd on sys.path: toy_workload imports
    ray.init(num_cpus=4, num_gpus=1, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield
    ray.shutdown()


@ray.remote(num_cpus=0, num_gpus=0.25)
def _beside(seconds: float) -> None:
    time.sleep(seconds)


def test_a_run_that_needs_a_larger_share_is_not_starved_by_smaller_ones(tmp_path, one_fake_gpu):
    beside = _beside.remote(300.0)  # a quarter of the GPU, for the whole screen
    small = [{"batch_size": 8, "lr": 1e-3 * (i + 1)} for i in range(12)]
    proposals = small[:2] + [{"batch_size": BIG, "lr": 1e-3}] + small[2:]

    def share(config: dict) -> dict:
        return {"cpu": 1, "gpu": 0.75 if config["batch_size"] == BIG else 0.25}

    rows = run_proposals(
        "screen",
        tmp_path,
        # each run ~2 s (its two warm-up steps sleep), so the small ones overlap and never all free at once
        TrialSpec.of({**TOY, "workload": "toy_workload:make_slow_start_workload"}).as_tune(),
        Placement(share, concurrent=4),
        trials=len(proposals),
        make_searcher=lambda: Listed(proposals),
        stopper_ratio=0.0,
        time_budget_s=None,
    )
    ray.cancel(beside, force=True)
    finished = [r.config["batch_size"] for r in rows if r.status == "ok"]  # in the order they finished
    assert len(finished) == len(proposals), [(r.config, r.status, r.error) for r in rows]
    # Starved, it would run only once no small one was left to take its place: last, or nearly.
    assert finished.index(BIG) <= 4, finished
