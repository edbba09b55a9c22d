"""The screen's time budget is GPU time: more GPUs spend it sooner; its floor is its start points, not a constant."""

from pathlib import Path

import pytest

from tuner.config import SearchSection, load_search_config
from tuner.measure.screen_budget import wall_budget_s

ROOT = Path(__file__).resolve().parents[1]


def search(*sets: str) -> SearchSection:
    return load_search_config(str(ROOT / "configs" / "default.yaml"), list(sets)).search


@pytest.mark.parametrize(
    "gpus, sets, wall",
    [
        (0, (), 120),  # a CPU machine: the budget is wall time
        (1, (), 120),  # default.yaml: 2m of GPU time
        (2, (), 60),
        (4, (), 30),  # no constant floor: the clock waits for the start points (test_screen_clock.py)
        (4, ("search.compile_deadline=10m", "search.time_budget=6m"), 90),
    ],
)
def test_n_gpus_spend_the_screens_gpu_time_in_a_nth_of_the_wall_time(gpus, sets, wall):
    assert wall_budget_s(search(*sets), gpus) == pytest.approx(wall)


def test_no_budget_stays_no_budget():
    assert wall_budget_s(search("search.time_budget=null"), 4) is None
