"""How a phase's experiment ended, told truly: only a signal is an interrupt (Interrupted, exit 130); Ray Tune
ending an experiment on its own with trials unfinished is a failure (TuneFailed, exit 1) that names why.
Real Ray Tune in this process, on the toy workload, workers reused as on a CPU."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from toy_workload import TOY

from tests.test_searcher import tpe
from trainables.spec import TrialSpec
from tuner.runs.ledger import Ledger
from tuner.runs.request import Placement
from tuner.runs.tune import Interrupted, TuneFailed, run_cases, run_proposals

TESTS = Path(__file__).resolve().parent
ONE_WORKER = Placement({"cpu": 1}, 1, reuse_actors=True)


def test_tune_failing_a_trial_on_its_own_is_a_failure_that_names_it_not_an_interrupt(
    tmp_path, shared_cpu_ray
):
    """And a phase that ended on its own leaves Ctrl-C to the search: Tune leaves its SIGINT handler installed
    after fit(), and a Ctrl-C between phases would only have set the flag of a finished experiment."""
    # Python's own handler to start from, as a search has: a suite started in the background by a
    # non-interactive shell (`cmd &`) inherits SIGINT ignored, and put back, that raised nothing
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # Every proposal is stopped at its first speed report (a resumed screen already found a far faster
    # config), and its data source takes seconds to shut down; Tune then cannot reset that worker for the
    # next trial and fails it without telling the callbacks: fit() returns with a trial unfinished, and
    # no signal was sent.
    Ledger(tmp_path, "screen").append({"status": "ok", "tokens_per_s": 1e12, "config": {"seed": 0}})
    slow_shutdown = {**TOY, "workload": "slow_shutdown_workload:make_slow_shutdown_workload"}
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(TuneFailed) as failed:
        run_proposals(
            "screen",
            tmp_path,
            TrialSpec.of(slow_shutdown).as_tune(),
            ONE_WORKER,
            trials=3,
            make_searcher=lambda: tpe({"seed": [1, 2, 3, 4, 5, 6]}, []),
            stopper_ratio=0.5,
            clock=None,
        )
    said = str(failed.value)
    assert not isinstance(failed.value, KeyboardInterrupt)
    assert said.startswith("screen: Ray Tune ended the experiment with 2 of 3 trials finished: Ray trial "), (
        said
    )
    assert "reused worker" in said and "reset_config()" in said and "\n" not in said, said
    assert signal.getsignal(signal.SIGINT) is before  # Tune's handler is not left behind
    with pytest.raises(KeyboardInterrupt):  # the next Ctrl-C reaches the search
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1.0)  # the handler runs here, in the main thread


def test_a_real_ctrl_c_during_a_phase_is_still_an_interrupt(tmp_path, shared_cpu_ray):
    cases = [TrialSpec.of({**TOY, "seed": i}) for i in range(3)]
    cases[1] = cases[1].with_train(tokens=8 * 16 * 400_000)  # trains for minutes: the Ctrl-C lands in it
    ledger = Ledger(tmp_path, "p")

    def ctrl_c_after_the_first_row():
        deadline = time.time() + 120
        while not ledger.rows() and time.time() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGINT)  # as the terminal sends it: Tune's handler catches it

    before = signal.getsignal(signal.SIGINT)
    sender = threading.Thread(target=ctrl_c_after_the_first_row, daemon=True)
    sender.start()
    with pytest.raises(Interrupted, match=r"^p: 1 of 3 trials finished$"):
        run_cases("p", tmp_path, cases, ONE_WORKER)
    sender.join(timeout=5)
    assert signal.getsignal(signal.SIGINT) is before
