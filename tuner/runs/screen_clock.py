"""When the screen stops proposing and when it ends, from the compiles it measured rather than constants.

The screen's budget (search.time_budget, GPU time) is spent in 1/N of the wall time on N GPUs. Its floor
used to be `compile_deadline` (3 min, the longest a cold first step may take), so on 4 GPUs a 90 s budget
still took 180 s. Now the floor is the start points themselves: the screen ends at its budget once none of
them is still running, so none is lost to a slow compile, and waits no longer than they actually take (the
trials' own compile deadline bounds them; start points are proposed first, whatever the time). Near the
end, no other config is started that cannot get through a cold first step (the median measured in this
screen) before the budget ends: it would only be stopped mid-compile, and its compile would slow the runs
that can still finish.

The clock and the stopper that reads it live with the runs (tuner/runs/tune.py runs the screen's experiment);
the search sets this clock from its config and hardware in tuner/measure/screen_budget.py."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Collection, Hashable
from dataclasses import dataclass, field
from typing import Any

from ray.tune import Callback, Stopper


@dataclass(kw_only=True)
class ScreenClock:
    budget_s: float  # wall time after which the screen ends, once no start point is running
    cap_s: float  # the screen ends here regardless (its budget plus the trials' compile deadline)
    first_wave: frozenset[Hashable]  # the start points, frozen (tuner.space.knobs.freeze)
    started: float = field(default_factory=time.monotonic)
    cold_first_steps: list[float] = field(default_factory=list)  # warm-ups of cache misses, seconds
    placed_ids: set[str] = field(default_factory=set)  # Tune trial ids that got their place (ScreenStarts)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def saw(self, result: dict[str, Any]) -> None:
        """A trial's result: a finished cold first step (a compile cache miss) teaches the clock its length."""
        warmup = result.get("warmup_s")
        if result.get("done") and result.get("compile_cache_use") == "miss" and warmup:
            self.cold_first_steps.append(float(warmup))

    def cold_first_step_s(self) -> float:
        """The median cold first step measured so far; 0 until one is."""
        return statistics.median(self.cold_first_steps) if self.cold_first_steps else 0.0

    def proposing(
        self,
        seen: Collection[Hashable],
        room: Callable[[], bool] | None = None,
        running: dict[str, Hashable] | None = None,
    ) -> bool:
        """Whether to start a config now: a start point not yet `seen` (proposed or measured) always starts,
        any other only if it could get through a cold first step before the budget ends, no start point
        `running` still waits for its place, and `room()` says a place is free. A proposal made without a
        free place waits in Tune's queue and starts when it no longer can: two made ~50 s into a 2-minute
        screen start at ~96 s (the places are held by the runs beside it) and are stopped mid-compile,
        after holding the places the answer's loss run ahead waits 40 s for (2 H200s, docs/benchmarks.md)."""
        if self._first_wave_left(seen):
            return True
        if self.start_point_waits(running or {}):
            return False
        if room is not None and not room():
            return False
        return self.elapsed() + self.cold_first_step_s() < self.budget_s

    def start_point_waits(self, running: dict[str, Hashable]) -> bool:
        """Whether a start point proposed (`running`: Tune trial id -> frozen config) still waits for its
        place: then nothing else is proposed, or a smaller proposal takes each place freed. At 100M on one
        H200 the batch-32 start points (3/6 of the GPU by the probe's eager peak) waited 5 minutes while a
        TPE proposal took the place freed, and the last was cut mid-compile (docs/benchmarks.md)."""
        return any(key in self.first_wave and tid not in self.placed_ids for tid, key in running.items())

    def ended(
        self, running: Collection[Hashable], seen: Collection[Hashable], placed: Collection[Hashable] = ()
    ) -> bool:
        """`running`: the frozen configs of the trials still running (or waiting for a place); `seen`: those
        and the measured ones; `placed`: those of `running` that have their place. Past the cap, the screen
        waits only for a start point that has its place (its own compile deadline bounds it)."""
        elapsed = self.elapsed()
        if elapsed >= self.cap_s:
            return not any(key in self.first_wave for key in placed)
        waiting = self._first_wave_left(seen) or any(key in self.first_wave for key in running)
        return elapsed >= self.budget_s and not waiting

    def _first_wave_left(self, seen: Collection[Hashable]) -> bool:
        return any(key not in seen for key in self.first_wave)

    def notice(self) -> str:
        measured = f"{self.cold_first_step_s():.0f} s" if self.cold_first_steps else "none measured"
        return f"budget {self.budget_s:.0f} s of wall time, cold first step {measured}"


class ScreenEnd(Stopper):
    """Ends the screen's Tune experiment when the clock says so, from the searcher's running and measured
    configs (tuner.space.searcher.ScreenSearcher keeps both, frozen)."""

    def __init__(self, clock: ScreenClock, searcher: Any):
        self.clock, self.searcher = clock, searcher

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        self.clock.saw(result)
        return False

    def stop_all(self) -> bool:
        placed = {key for tid, key in self.searcher.running.items() if tid in self.clock.placed_ids}
        return self.clock.ended(*seen_by(self.searcher), placed)


class ScreenStarts(Callback):
    """Tells the clock each trial that got its place (Tune starts it), so a start point still waiting for
    one holds back other proposals (ScreenClock.start_point_waits)."""

    def __init__(self, clock: ScreenClock):
        self.clock = clock

    def on_trial_start(self, iteration, trials, trial, **info):
        self.clock.placed_ids.add(trial.trial_id)


def seen_by(searcher: Any) -> tuple[Collection[Hashable], Collection[Hashable]]:
    """(running, seen): the frozen configs a ScreenSearcher is running, and those plus the measured."""
    running = set(searcher.running.values())
    return running, running | set(searcher.measured)
