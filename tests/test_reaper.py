"""The reaper ends what a SIGKILLed driver started after it, and leaves what the driver had before."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time

import psutil

DRIVER = """
import subprocess, time
from tuner.session.ray_session import RaySession
before = subprocess.Popen(["sleep", "120"])
session = RaySession(others=frozenset({before.pid}))
session._start_reaper()  # returns once the reaper watches
after = subprocess.Popen(["sleep", "120"])
print(before.pid, after.pid, session.reaper.pid, flush=True)
time.sleep(120)
"""


def test_a_sigkilled_driver_s_later_children_end_and_its_earlier_ones_stay():
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], stdout=subprocess.PIPE, text=True)
    before = after = reaper = None
    try:
        before, after, reaper = map(psutil.Process, map(int, driver.stdout.readline().split()))
        time.sleep(1.5)  # the reaper looks every 0.5 s: it has seen `after`
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        gone, _ = psutil.wait_procs([after, reaper], timeout=10)
        assert {p.pid for p in gone} == {after.pid, reaper.pid}  # reaped, and the reaper ended
        assert before.is_running() and before.status() != psutil.STATUS_ZOMBIE
    finally:
        for proc in (driver, before, after):
            with contextlib.suppress(psutil.Error, AttributeError):
                proc.kill()  # those already ended raise, and None has no kill
