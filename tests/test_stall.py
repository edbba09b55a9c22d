"""A progress line that has not moved says why, when the host shows it: trials starved of CPU by processes at
a higher priority (Ray's workers run at nice 15). Real processes: two busy loops at nice 0 outside the
driver's tree, and a "trial worker" at nice 15 inside it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tuner.runs.stall import STALL_S, StallWatch

BUSY = "while True: pass"


def orphan_busy_loop() -> int:
    """A busy loop at nice 0 that is not this process's descendant (its shell parent exits at once)."""
    shell = subprocess.run(
        ["sh", "-c", f"{sys.executable} -c '{BUSY}' >/dev/null 2>&1 & echo $!"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(shell.stdout.strip())


def test_trials_starved_by_busier_processes_at_a_higher_priority_are_named():
    trial = subprocess.Popen([sys.executable, "-c", f"import os; os.nice(15)\n{BUSY}"])
    burners = [orphan_busy_loop(), orphan_busy_loop()]
    try:
        watch = StallWatch("screen")
        watch.advanced_at = time.time() - STALL_S - 30  # no result for 1m30s
        assert watch.explain(1, [trial.pid], ["case 0"], time.time()) is None  # a first sample only
        time.sleep(3.0)
        said = watch.explain(1, [trial.pid], ["case 0"], time.time())
    finally:
        for pid in burners:
            os.kill(pid, signal.SIGKILL)
        trial.kill()
        trial.wait()
    assert said is not None and said.startswith("[screen] no trial has advanced for 1m"), said
    assert "other processes kept the CPUs busy at a higher priority than the trials (nice 15)" in said, said
    assert any(str(pid) in said for pid in burners), said


def test_a_phase_whose_trial_just_reported_is_not_called_stalled():
    watch = StallWatch("screen")
    watch.explain(1, [os.getpid()], [], time.time())
    watch.advanced()  # a trial's result just now
    assert watch.explain(1, [os.getpid()], [], time.time() + 1) is None
