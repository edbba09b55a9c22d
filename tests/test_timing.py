"""The step timer on a fake clock: warm-up apart, steady speed, step-time statistics, compile time, the
telemetry window, eval time left out, CUDA events read only at syncs, and runs too short to be steady."""

from __future__ import annotations

import os

import pytest

from trainables.training.cpu_load import CpuSnapshot
from trainables.training.timing import StepTimer

TOKENS = 100  # per step
WALL0 = 1_000.0  # time.time() when the fake perf_counter reads 0
WARMUP = [4.0, 2.0]  # seconds: the first step compiles
STEADY = [0.125, 0.25, 0.375, 0.5]  # exact in binary, so sums are exact


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def wall(self) -> float:
        return WALL0 + self.now

    def cpu(self) -> CpuSnapshot:
        # the host is 2 cores busy throughout; this run keeps 1 busy from t = 6 s (the steady phase) on
        return CpuSnapshot(t=self.now, host_busy_s=2 * self.now, own_s=max(0.0, self.now - 6.0))


class FakeEvent:
    """A CUDA event: record() stamps the (fake) device time; elapsed_time is in ms."""

    def __init__(self, clock: FakeClock):
        self.clock, self.at = clock, None

    def record(self) -> None:
        self.at = self.clock.now

    def elapsed_time(self, end: FakeEvent) -> float:
        return (end.at - self.at) * 1000


def make_timer(clock: FakeClock, warmup: int = len(WARMUP), **kwargs) -> StepTimer:
    return StepTimer(warmup, TOKENS, clock=clock, wall=clock.wall, cpu_snapshot=clock.cpu, **kwargs)


def run(timer: StepTimer, clock: FakeClock, durations: list[float]) -> None:
    for seconds in durations:
        with timer.step():
            clock.now += seconds


def test_steady_speed_step_times_and_compile_time_leave_the_warmup_out():
    clock = FakeClock()
    timer = make_timer(clock)
    timer.start()
    run(timer, clock, WARMUP)
    assert timer.window() == {
        "tokens_per_s": None,
        "warmup_s": 6.0,
        "window_t0": WALL0 + 6.0,
        "window_t1": None,
        "window_tokens": 0,
        "cpu_own_cores": None,  # no segment of the window has ended yet
        "cpu_others_cores": None,
        "cpu_count": os.cpu_count(),
    }
    run(timer, clock, STEADY)
    assert timer.close_segment() == 7.25
    summary = timer.summary()
    assert summary["tokens_per_s"] == 4 * TOKENS / 1.25
    assert (summary["window_t0"], summary["window_t1"], summary["window_tokens"]) == (1006.0, 1007.25, 400)
    assert (summary["step_ms_median"], summary["step_ms_p90"]) == (312.5, 500.0)
    assert summary["compile_s"] == 6.0 - 2 * 0.3125  # the warm-up's excess over two steady steps
    assert (summary["cpu_own_cores"], summary["cpu_others_cores"]) == (1.0, 1.0)  # over the window only
    assert summary["cpu_count"] == os.cpu_count()


def test_eval_time_between_segments_is_not_training_time():
    clock = FakeClock()
    timer = make_timer(clock)
    timer.start()
    run(timer, clock, WARMUP + STEADY[:2])
    timer.close_segment()
    assert timer.window()["tokens_per_s"] == round(2 * TOKENS / 0.375, 1)  # rounded to 0.1 tok/s
    clock.now += 30.0  # an eval
    timer.resume()
    run(timer, clock, STEADY[2:])
    now = timer.close_segment()
    assert timer.tokens_per_s == 4 * TOKENS / 1.25
    assert timer.window()["window_t1"] == WALL0 + now and timer.rate(now) == timer.tokens_per_s


def test_cuda_step_times_come_from_events_read_at_syncs():
    clock = FakeClock()
    syncs = []
    timer = make_timer(clock, device_sync=lambda: syncs.append(clock.now), new_event=lambda: FakeEvent(clock))
    timer.start()
    run(timer, clock, WARMUP + STEADY)
    assert syncs == [0.0, 6.0]  # start and the warm-up's end: none per step
    assert timer.times.step_s == []  # the events are not read before a sync
    timer.close_segment()
    assert syncs == [0.0, 6.0, 7.25]
    assert timer.times.step_s == pytest.approx(STEADY)
    assert timer.summary()["step_ms_median"] == 312.5


def test_a_run_too_short_to_be_steady_reports_its_overall_rate_and_whole_window():
    clock = FakeClock()
    timer = make_timer(clock, warmup=5)
    timer.start()
    run(timer, clock, [0.5, 0.5, 0.5])
    assert timer.rate(timer.close_segment()) == 3 * TOKENS / 1.5
    summary = timer.summary()
    assert summary["tokens_per_s"] == 3 * TOKENS / 1.5
    assert (summary["window_t0"], summary["window_t1"], summary["window_tokens"]) == (1000.0, 1001.5, 300)
    assert summary["compile_s"] is None and summary["step_ms_median"] is None and summary["warmup_s"] is None
    # the CPU load over the whole run: this run was busy only after t = 6 s, so none of it
    assert (summary["cpu_own_cores"], summary["cpu_others_cores"]) == (0.0, 2.0)


def test_the_window_so_far_carries_the_cpu_load_that_a_run_stopped_early_reports():
    # a screen trial is stopped on an interim report after a few steady steps: that report is all it leaves,
    # so the CPU shares over its window must travel with it, or its speed has no trust mark
    clock = FakeClock()
    timer = make_timer(clock)
    timer.start()
    run(timer, clock, WARMUP + STEADY[:2])
    before_any_end = timer.window()
    assert before_any_end["cpu_own_cores"] is None and before_any_end["cpu_others_cores"] is None
    timer.close_segment()
    window = timer.window()
    assert (window["cpu_own_cores"], window["cpu_others_cores"]) == (1.0, 1.0)
    assert window["cpu_count"] == os.cpu_count()
    run(timer, clock, STEADY[2:])  # steps after the last segment's end do not move it until the next end
    assert timer.window()["cpu_others_cores"] == 1.0


def test_a_window_too_short_to_judge_has_no_cpu_shares():
    # a 0.125 s window is a dozen scheduler ticks: its shares would be rounding, so they are left out
    clock = FakeClock()
    timer = make_timer(clock)
    timer.start()
    run(timer, clock, WARMUP + STEADY[:1])
    timer.close_segment()
    window = timer.window()
    assert window["tokens_per_s"] == TOKENS / 0.125
    assert window["cpu_own_cores"] is None and window["cpu_others_cores"] is None
    assert timer.summary()["cpu_others_cores"] is None


def test_a_new_window_forgets_the_load_of_the_one_before():
    clock = FakeClock()
    timer = make_timer(clock, warmup=1)
    timer.start()
    run(timer, clock, [4.0, 0.5])
    timer.close_segment()
    assert timer.window()["cpu_others_cores"] is not None
    clock.now += 10.0  # waited for the GPU's timing gate
    timer.begin_window()
    assert timer.window()["cpu_others_cores"] is None
