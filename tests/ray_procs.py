"""Ray nodes the tests start themselves (`ray start --block`, each in a process group of its own), so a test
stops exactly what it started and never another session's Ray: free ports, and stopping a node's group."""

from __future__ import annotations

import os
import signal
import socket
import subprocess


def free_ports(n: int) -> list[int]:
    """n distinct free TCP ports on 127.0.0.1 (held open together, so none is handed out twice)."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to `ray start --block` (it stops its node), then SIGKILL to whatever is left of its group."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
