"""Step timing the way the tuner needs it, kept apart from the training loop.

Steps before `warmup_steps` (compilation, autotuning, CUDA-graph capture) are timed apart as `warmup_s`;
their excess over steady steps is the one-off `compile_s`. Steady tokens/s is steady tokens over steady
time, summed over segments that end at host-device syncs the loop makes anyway (log and eval points), so
timing adds no syncs of its own; eval time between segments is left out. Step-time median and p90 come
from CUDA events on GPU (read at segment ends) and the wall clock on CPU. The wall-clock (time.time)
window of the steady phase, its tokens and the host's CPU load over it are what telemetry is joined on; the
load so far travels with the window at every segment's end, so a run stopped early keeps its trust mark.
`FirstStepDeadline` bounds the first step (the compile) for speed screens.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psutil
import torch

from trainables.common.exit_codes import Exit
from trainables.training import cpu_load


class StepTimes:
    """The steady steps' durations and their median, p90 and the compile time they imply: from CUDA events
    on GPU, read only at the syncs the loop makes anyway (`read`), and from the clock on CPU."""

    def __init__(self, clock: Callable[[], float], new_event: Callable[[], Any] | None):
        self.clock, self.new_event = clock, new_event
        self.step_s: list[float] = []
        self._events: list[tuple[Any, Any]] = []  # CUDA events of steps not yet read

    @contextmanager
    def timed(self) -> Iterator[None]:
        """Times one step: a pair of events (read later), or the clock."""
        begin = self.new_event() if self.new_event else None
        if begin is not None:
            begin.record()
        started = self.clock()
        yield
        if begin is not None and self.new_event is not None:  # begin is an event only where new_event is
            end = self.new_event()
            end.record()
            self._events.append((begin, end))
        else:
            self.step_s.append(self.clock() - started)

    def read(self) -> None:
        """The durations of the events recorded since the last read; the caller has just synced."""
        self.step_s.extend(begin.elapsed_time(end) / 1000 for begin, end in self._events)
        self._events.clear()

    def stats(self, warmup_s: float | None, warmup_steps: int) -> dict[str, float | None]:
        if not self.step_s:
            return {"step_ms_median": None, "step_ms_p90": None, "compile_s": None}
        ms = sorted(t * 1000 for t in self.step_s)
        median = round(statistics.median(ms), 3)
        compile_s = None
        if warmup_s is not None:
            # The warm-up steps' excess over steady steps is the one-off cost (compile, autotune, graphs).
            compile_s = round(max(0.0, warmup_s - warmup_steps * median / 1000), 3)
        p90 = round(ms[min(len(ms) - 1, int(0.9 * len(ms)))], 3)
        return {"step_ms_median": median, "step_ms_p90": p90, "compile_s": compile_s}


class SteadyWindow:
    """The wall-clock (time.time) window of the steady phase, its tokens and the host's CPU load over it:
    what telemetry is joined on. The load is taken at each segment's end (`close`), so the window so far
    carries it."""

    def __init__(self, wall: Callable[[], float], cpu_snapshot: Callable[[], cpu_load.CpuSnapshot | None]):
        self.wall, self.cpu_snapshot = wall, cpu_snapshot
        self.t0: float | None = None
        self.t1: float | None = None
        self.tokens = 0
        self._cpu: dict[str, cpu_load.CpuSnapshot | None] = dict.fromkeys(("start", "t0", "t1"))
        self._load = cpu_load.window_load(None, None)  # the CPU load over the window so far

    def start_run(self) -> None:
        """The run starts: its CPU load is the window's for a run too short to have one (`whole_run`)."""
        self._cpu["start"] = self.cpu_snapshot()

    def open(self) -> None:
        self.t0, self._cpu["t0"] = self.wall(), self.cpu_snapshot()
        self._load = cpu_load.window_load(None, None)

    def close(self, tokens: int) -> None:
        """The window so far ends now, with `tokens` steady tokens in it."""
        self.t1, self.tokens = self.wall(), tokens
        self._cpu["t1"] = self.cpu_snapshot()
        # here, not in figures(): the loop reads the window every step, this once per segment
        self._load = cpu_load.window_load(self._cpu["t0"], self._cpu["t1"])

    def figures(self) -> dict[str, Any]:
        """The window up to its last segment's end, and the CPU load over it (None until one ended)."""
        return {"window_t0": self.t0, "window_t1": self.t1, "window_tokens": self.tokens, **self._load}

    def final_load(self) -> dict[str, float | int | None]:
        return cpu_load.window_load(self._cpu["t0"], self._cpu["t1"])

    def whole_run(self, elapsed: float, tokens: int) -> dict[str, Any]:
        """The whole run as the window (warm-up included), `elapsed` seconds and `tokens` up to now, and the
        CPU load over it: for a run too short to have a steady phase, so its GPU figures still exist."""
        t1 = self.wall()
        load = cpu_load.window_load(self._cpu["start"], self.cpu_snapshot())
        return {"window_t0": t1 - elapsed, "window_t1": t1, "window_tokens": tokens, **load}


class StepTimer:
    """Call `start()`, wrap each optimizer step in `with timer.step():`, call `close_segment()` at each
    log point (it syncs) and `resume()` after an eval; `window()` is the steady window so far and
    `summary()` every timing figure of the run.

    `clock` is time.perf_counter, `wall` time.time; `device_sync` waits for queued device work and
    `new_event` makes a timing event (CUDA), both None on CPU. Tests pass fakes of all four. The steady
    steps' durations are `times` (StepTimes), the telemetry window `steady_window` (SteadyWindow).
    """

    def __init__(
        self,
        warmup_steps: int,
        tokens_per_step: int,
        *,
        clock: Callable[[], float] = time.perf_counter,
        wall: Callable[[], float] = time.time,
        device_sync: Callable[[], None] | None = None,
        new_event: Callable[[], Any] | None = None,
        cpu_snapshot: Callable[[], cpu_load.CpuSnapshot | None] = cpu_load.snapshot,
    ):
        self.warmup_steps, self.tokens_per_step = warmup_steps, tokens_per_step
        self.clock, self.device_sync = clock, device_sync
        self.times = StepTimes(clock, new_event)
        self.steady_window = SteadyWindow(wall, cpu_snapshot)
        self.steps, self.steady_tokens, self.steady_s = 0, 0, 0.0
        self.run_start = self.segment_start = 0.0
        self.warmup_s: float | None = None
        self.waited_s = 0.0  # excluded from the warm-up
        self.tokens_per_s: float | None = None

    @classmethod
    def for_device(cls, device: torch.device, warmup_steps: int, tokens_per_step: int) -> StepTimer:
        if device.type != "cuda":
            return cls(warmup_steps, tokens_per_step)
        return cls(
            warmup_steps,
            tokens_per_step,
            device_sync=lambda: torch.cuda.synchronize(device),
            new_event=lambda: torch.cuda.Event(enable_timing=True),
        )

    def _now(self) -> float:
        if self.device_sync is not None:
            self.device_sync()
        return self.clock()

    def start(self) -> None:
        self.run_start = self.segment_start = self._now()
        self.steady_window.start_run()

    @contextmanager
    def step(self) -> Iterator[None]:
        """Times one optimizer step (all its micro-batches); the last warm-up step ends the warm-up."""
        steady = self.steps >= self.warmup_steps
        with self.times.timed() if steady else contextlib.nullcontext():
            yield
        if steady:
            self.steady_tokens += self.tokens_per_step
        self.steps += 1
        if self.steps == self.warmup_steps:
            self.warmup_s = round(self.close_segment() - self.run_start - self.waited_s, 3)
            self.steady_window.open()

    def close_segment(self) -> float:
        """Syncs and ends the segment since the last one (steady time once past the warm-up); returns now."""
        now = self._now()
        if self.steps > self.warmup_steps:
            self.steady_s += now - self.segment_start
        self.segment_start = now
        self.times.read()
        if self.steady_s > 0:
            self.tokens_per_s = round(self.steady_tokens / self.steady_s, 1)
            self.steady_window.close(self.steady_tokens)
        return now

    def exclude_from_warmup(self, seconds: float) -> None:
        """Time spent waiting during the warm-up (for a shared GPU) is not warm-up."""
        self.waited_s += seconds

    def begin_window(self) -> None:
        """The steady window starts now, not when the warm-up ended: time spent waiting between the two
        (for a GPU another run is being timed on) is neither warm-up nor steady time."""
        self.segment_start = self._now()
        self.steady_window.open()

    def resume(self) -> None:
        """Starts the next segment now: the time since the last close (an eval) is not training time."""
        self.segment_start = self._now()

    def rate(self, now: float) -> float:
        """Steady tokens/s so far, else the overall rate since start (for ETAs)."""
        return self.tokens_per_s or self.steps * self.tokens_per_step / max(now - self.run_start, 1e-9)

    def window(self) -> dict[str, Any]:
        """The steady phase so far: speed, wall-clock window and its tokens, the warm-up's length, and the
        host's CPU load over the window up to its last segment's end (None until one ended, or while too
        short to judge)."""
        return {"tokens_per_s": self.tokens_per_s, "warmup_s": self.warmup_s, **self.steady_window.figures()}

    def summary(self) -> dict[str, Any]:
        """Every timing figure of the run, with the host's CPU load over its window (after the last step)."""
        figures = {**self.window(), **self.times.stats(self.warmup_s, self.warmup_steps)}
        if self.tokens_per_s is None:
            # Too short to have a steady phase: the overall rate, flagged by compile_s = None, and the whole
            # run as the telemetry window (warm-up included).
            elapsed = self._now() - self.run_start
            tokens = self.steps * self.tokens_per_step
            rate = round(tokens / max(elapsed, 1e-9), 1)
            return {**figures, "tokens_per_s": rate, **self.steady_window.whole_run(elapsed, tokens)}
        return {**figures, **self.steady_window.final_load()}


STUCK_GRACE_S = 30.0  # how long past its deadline a first step may take to notice it, per stage


class CompileDeadline(Exception):  # noqa: N818 - raised into the thread by FirstStepDeadline
    """The first step (compile, autotuning, graph capture) outlasted `compile_deadline_s`."""


class FirstStepDeadline:
    """Raises CompileDeadline in the training thread if it is still inside the block after `seconds`.

    The block is the first step, where torch.compile blocks for minutes (max-autotune's cold autotuning
    takes >5 on an H100) without returning to the loop, so a check between steps would come too late: the
    exception is set asynchronously and lands at the thread's next Python bytecode (compilation is mostly
    Python, so within a second or so). A search gives up on such a config and uses the slot for new ones.

    A thread blocked in C never runs that bytecode: the 100M hybrid's bf16 max-autotune-no-cudagraphs first
    step sat 12.5 minutes past its 5-minute deadline at ~1 core (one H200), most likely waiting on
    its compile workers (not confirmed: its stack was not captured), and held the screen open for as long.
    So `grace_s` after the deadline the child processes it waits on (Inductor's compile and autotune
    workers) are ended, which wakes it with an error and lets the exception land; `grace_s` after that,
    still stuck, the process exits (its trial ends as an error)."""

    def __init__(self, seconds: float | None, grace_s: float = STUCK_GRACE_S):
        self.seconds, self.grace_s, self.lock, self.inside = seconds, grace_s, threading.Lock(), False
        self.fired = False
        self.timers: list[threading.Timer] = []

    def __enter__(self) -> None:
        if self.seconds is None:
            return
        self.thread, self.inside = threading.get_ident(), True
        self._after(self.seconds, self._fire)

    def _after(self, seconds: float, then: Callable[[], None]) -> None:
        timer = threading.Timer(seconds, then)
        timer.daemon = True
        self.timers.append(timer)
        timer.start()

    def _fire(self) -> None:
        with self.lock:
            if self.inside:
                self.fired = True
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(self.thread), ctypes.py_object(CompileDeadline)
                )
                self._after(self.grace_s, self._end_children)

    def _end_children(self) -> None:
        with self.lock:
            if not self.inside:
                return
            children = psutil.Process().children(recursive=True)
            print(
                f"compile deadline: the first step has not returned {self.grace_s:g} s after its "
                f"{self.seconds:g} s deadline; ending the {len(children)} worker process(es) it waits on",
                file=sys.stderr,
                flush=True,
            )
            for child in children:
                with contextlib.suppress(psutil.Error):
                    child.kill()
            self._after(self.grace_s, self._exit_stuck)

    def _exit_stuck(self) -> None:
        with self.lock:
            if self.inside:
                print("compile deadline: the first step is still stuck; ending the process", file=sys.stderr)
                os._exit(int(Exit.FAILED))

    def __exit__(self, exc_type, exc, tb) -> None:
        with self.lock:
            self.inside = False
        for timer in self.timers:
            timer.cancel()
        if self.fired and exc is not None and not isinstance(exc, CompileDeadline):
            # woken by its ended workers' error, before the pending exception landed
            raise CompileDeadline(f"the first step ran over its {self.seconds:g} s deadline") from exc
