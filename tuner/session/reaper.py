"""`python tuner/session/reaper.py DRIVER_PID [PID ...]`: ends the local Ray processes a driver started when the
driver dies, however it died (SIGKILL included, where no clean-up of the driver's own can run).

Ray ties its GCS and raylet to the driver that started them (the kernel's parent-death signal), but the
dashboard and runtime-env agents notice the raylet's death only after several checks and then try to reach
the dead GCS: they outlived a killed driver by minutes. The reaper is a small process of its own session
(so Ctrl-C to the driver's process group leaves it be); its stdin is a pipe whose only writer is the driver.
While the pipe is open it notes the driver's descendants every POLL_S; at end of file (the driver is gone)
it kills every one of them still alive, except the PIDs the driver named (its children before Ray started).

It is started by its file, not as `-m tuner.session.reaper`: the package's import brings torch (seconds on a
busy machine), and Ray's agents came up meanwhile. It prints "ready" after its first look, and the driver
starts Ray only then, so no Ray process can start before the reaper watches.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys

import psutil

POLL_S = 0.5


def _descendants(driver: psutil.Process) -> dict[int, float]:
    """pid -> create time (so a pid reused after its process ended is never killed)."""
    out = {}
    with contextlib.suppress(psutil.Error):
        for proc in driver.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                out[proc.pid] = proc.create_time()
    return out


def watch(driver_pid: int, before: set[int]) -> dict[int, float]:
    """The driver's descendants seen while its pipe (our stdin) stayed open, less `before` and ourselves."""
    driver = psutil.Process(driver_pid)
    before = before | {os.getpid()}
    seen = {p: t for p, t in _descendants(driver).items() if p not in before}
    print("ready", flush=True)  # the driver waits for this before it starts Ray
    while True:
        ready, _, _ = select.select([sys.stdin.fileno()], [], [], POLL_S)
        if ready and not os.read(sys.stdin.fileno(), 4096):
            return seen  # end of file: the driver's end of the pipe closed (it exited or was killed)
        seen.update({p: t for p, t in _descendants(driver).items() if p not in before})


def reap(seen: dict[int, float]) -> int:
    """SIGKILL each process still alive (same pid, same create time); how many were."""
    alive = []
    for pid, created in seen.items():
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            if proc.create_time() == created:
                proc.kill()
                alive.append(proc)
    psutil.wait_procs(alive, timeout=5)
    return len(alive)


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver handles Ctrl-C; the reaper waits for its end
    reap(watch(int(sys.argv[1]), {int(pid) for pid in sys.argv[2:]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
