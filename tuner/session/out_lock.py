"""One search per OUT: OUT/.search.lock, held by the live driver.

Two drivers on one OUT corrupt each other (both append to one optuna.journal: the first crashed within 90 s
of a second started with --resume). The lock is the kernel's (flock on an open file), so it is released by
the holder's death, SIGKILL included, and never by a file left behind; the file only says who holds it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from trainables.config import ConfigError

LOCK_NAME = ".search.lock"


@dataclass
class OutLock:
    """Held from `take` to `release` (or the process's end)."""

    out: Path
    fd: int | None = None

    @property
    def path(self) -> Path:
        return self.out / LOCK_NAME

    def take(self, command: str) -> None:
        """The lock, or ConfigError naming the process that holds it (OUT must exist)."""
        while self.fd is None:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise ConfigError(f"--out: {self.out} is in use by {self._holder()}") from None
            if _same_file(fd, self.path):  # else a releasing holder unlinked it between our open and flock
                self.fd = fd
            else:
                os.close(fd)
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(), "command": command}
        os.ftruncate(self.fd, 0)
        os.write(self.fd, json.dumps(holder).encode())

    def release(self) -> None:
        """Unlinked while still held (so no one waits on a file about to vanish), then closed."""
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()
        os.close(self.fd)
        self.fd = None

    def _holder(self) -> str:
        try:
            held = json.loads(self.path.read_text())
            since = time.strftime("%H:%M:%S", time.localtime(held["since"]))
            return (
                f"another search (pid {held['pid']} on {held['host']}, since {since}: {held['command']}); "
                "wait for it to end, stop it, or pick another --out"
            )
        except (OSError, ValueError, KeyError, TypeError):
            return "another search (its lock file is being written); pick another --out"


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.fstat(fd).st_ino == path.stat().st_ino
    except FileNotFoundError:
        return False
