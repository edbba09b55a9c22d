"""The screen's end follows its start points and the cold compiles it measured, not a constant floor."""

from __future__ import annotations

from pathlib import Path

from toy_workload import TOY

from tests.test_searcher import tpe
from trainables.spec import TrialSpec
from tuner.runs.ledger import Ledger
from tuner.runs.placement import room_now
from tuner.runs.request import Placement
from tuner.runs.screen_clock import ScreenClock
from tuner.runs.tune import run_proposals
from tuner.space.knobs import freeze

TESTS = Path(__file__).resolve().parent
START = {"seed": 1}, {"seed": 2}


def clock_at(elapsed: float, budget: float = 60.0, cap: float = 240.0) -> ScreenClock:
    clock = ScreenClock(budget_s=budget, cap_s=cap, first_wave=frozenset(map(freeze, START)))
    clock.started -= elapsed
    return clock


def test_the_screen_waits_for_a_start_point_past_its_budget_and_no_longer():
    running, seen = {freeze(START[0])}, {freeze(p) for p in START}
    assert not clock_at(70).ended(running, seen)  # a start point still compiling: not lost to the budget
    assert clock_at(70).ended(set(), seen)  # none running: the budget ends it
    assert not clock_at(50).ended(set(), seen)  # within the budget
    assert clock_at(250).ended(running, seen)  # the cap (budget + compile deadline) ends one still waiting
    # ... but not a start point that has its place: its own compile deadline bounds it (at 100M the last
    # start point started late and the cap cut it mid-compile)
    assert not clock_at(250).ended(running, seen, placed=running)


def test_a_start_point_not_yet_proposed_holds_the_screen_open_and_is_proposed_late():
    seen = {freeze(START[0])}  # the second start point waits for a slot
    assert not clock_at(70).ended(set(), seen)
    assert clock_at(70).proposing(seen)


def test_no_new_config_starts_that_could_not_get_through_a_cold_first_step_in_the_budget():
    seen = {freeze(p) for p in START}
    clock = clock_at(30)
    assert clock.proposing(seen)  # no cold first step measured yet
    clock.saw({"done": True, "compile_cache_use": "miss", "warmup_s": 40.0})
    clock.saw({"done": True, "compile_cache_use": "hit", "warmup_s": 2.0})  # a cache hit is no cold compile
    clock.saw({"done": False, "compile_cache_use": "miss", "warmup_s": 1.0})  # an interim report
    assert clock.cold_first_step_s() == 40.0
    assert not clock.proposing(seen)  # 30 s + 40 s is past the 60 s budget
    assert clock_at(10).proposing(seen)


def test_no_config_is_proposed_while_no_place_is_free_but_start_points_always_are():
    # Proposed without a free place, a config waits in Tune's queue and starts later than it was judged
    # for (2 H200s): the clock asks the placement whether a place is free now.
    free = [False]
    seen_none, seen_all = set(), {freeze(p) for p in START}
    assert clock_at(10).proposing(seen_none, lambda: free[0])  # a start point queues regardless
    assert not clock_at(10).proposing(seen_all, lambda: free[0])
    free[0] = True
    assert clock_at(10).proposing(seen_all, lambda: free[0])


def test_nothing_else_is_proposed_while_a_start_point_waits_for_its_place():
    # At 100M on one H200 a TPE proposal took each place freed while the batch-32 start points (sized 3/6
    # of the GPU) waited 5 minutes: a start point proposed and not yet started holds the rest back.
    seen = {freeze(p) for p in START}
    clock = clock_at(10)
    running = {"t1": freeze(START[0]), "t2": freeze(START[1])}
    clock.placed_ids.add("t1")
    assert not clock.proposing(seen, lambda: True, running)  # t2, a start point, waits for its place
    clock.placed_ids.add("t2")
    assert clock.proposing(seen, lambda: True, running)
    assert clock.proposing(seen, lambda: True, {"t3": freeze({"seed": 9})})  # a TPE proposal waiting: no hold


def test_a_screen_place_is_free_only_where_ray_has_its_cpus_and_gpu_share():
    need = {"CPU": 2, "GPU": 0.25}
    assert room_now(need, {"CPU": 2.0, "GPU": 0.25})
    assert not room_now(need, {"CPU": 1.0, "GPU": 1.0})  # the beside runs took the CPUs
    assert not room_now(need, {"CPU": 8.0, "GPU": 0.2})
    assert not room_now(need, {"CPU": 8.0})  # no GPU left at all: Ray omits the key


def test_a_budget_shorter_than_a_first_step_still_measures_every_start_point(tmp_path, shared_cpu_ray):
    # One slot, so the second start point starts only after the first; each has a 2 s first step (its
    # "compile"); the budget is 0.5 s. The screen runs both start points and nothing else.
    slow_start = {**TOY, "workload": "toy_workload:make_slow_start_workload"}
    rows = run_proposals(
        "screen",
        tmp_path,
        TrialSpec.of(slow_start).as_tune(),
        Placement({"cpu": 1}, 1, reuse_actors=True),
        trials=6,
        make_searcher=lambda: tpe({"seed": [1, 2, 3, 4, 5, 6]}, list(START)),
        stopper_ratio=0.0,
        clock=ScreenClock(budget_s=0.5, cap_s=120.0, first_wave=frozenset(map(freeze, START))),
    )
    assert sorted(r.config["seed"] for r in rows) == [1, 2]
    assert all(r.status == "ok" for r in rows)
    assert len(Ledger(tmp_path, "screen").rows()) == 2
