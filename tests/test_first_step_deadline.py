"""The first step's deadline (trainables/training/timing.py FirstStepDeadline) lands even where the compile waits in C
on its worker processes, which never runs the bytecode an asynchronous exception needs (on one H200 a
max-autotune-no-cudagraphs first step sat 12.5 minutes past its 5-minute deadline)."""

from __future__ import annotations

import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor

import pytest

from trainables.training.timing import CompileDeadline, FirstStepDeadline


def test_a_compile_waiting_on_its_workers_is_woken_and_times_out():
    # a first step blocked on a worker that never answers, as Inductor's waits on its compile workers
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as workers:
        started = time.monotonic()
        with pytest.raises(CompileDeadline), FirstStepDeadline(0.5, grace_s=1.0):
            workers.submit(time.sleep, 600).result()
        assert time.monotonic() - started < 10  # the deadline, then one grace: its worker was ended


def test_a_first_step_in_python_gets_the_exception_at_the_deadline():
    started = time.monotonic()
    with pytest.raises(CompileDeadline), FirstStepDeadline(0.3, grace_s=60.0):
        while True:
            time.sleep(0.01)
    assert time.monotonic() - started < 5


def test_a_first_step_that_ends_in_time_is_left_alone():
    deadline = FirstStepDeadline(5.0, grace_s=1.0)
    with deadline:
        pass
    for timer in deadline.timers:
        timer.join(1.0)  # cancelled on leaving the block, it ends at once; a 5 s timer left running would not
    assert deadline.timers and not any(t.is_alive() for t in deadline.timers), "its timer is cancelled"
    assert not deadline.fired
    none = FirstStepDeadline(None)
    with none:
        time.sleep(0.01)
    assert none.timers == [] and not none.fired, "no deadline: no timer"
