"""The search's stdout and stderr when they lead into a pipe that closes (`... 2>&1 | tee log`, Ctrl-C).

Ctrl-C reaches the whole pipeline: `tee` exits at once, and the search's next line meets a closed pipe.
A BrokenPipeError there would turn a resumable interrupt into a crash (exit 1) and hide the resume
command. Guarded streams swallow it: the rest of the output goes to /dev/null, and the lines that must be
seen (the resume command) go to the terminal the search was started from, when it has one.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any, NoReturn, TextIO

EXIT_GRACE_S = 30.0  # the interpreter's own clean-up after the last line: well under a second when healthy


class PipeSafe:
    """A text stream whose writes never raise BrokenPipeError: once its reader is gone it writes nowhere."""

    def __init__(self, stream: TextIO):
        self.stream = stream
        self.broken = False

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                self.stream.write(text)
            except (BrokenPipeError, ConnectionResetError):
                self._drop()
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if not self.broken:
            try:
                self.stream.flush()
            except (BrokenPipeError, ConnectionResetError):
                self._drop()

    def _drop(self) -> None:
        """From now on into /dev/null, the file descriptor too (so the interpreter's exit flush, and the
        output of anything writing to the descriptor directly, cannot fail either)."""
        self.broken = True
        with contextlib.suppress(OSError, ValueError):
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self.stream.fileno())
            os.close(null)

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding, ...: the stream's own
        return getattr(self.stream, name)


@contextlib.contextmanager
def guarded_streams() -> Iterator[None]:
    """sys.stdout and sys.stderr pipe-safe inside the block (the descriptor of a broken one stays on
    /dev/null after it, so the interpreter's exit flush cannot fail)."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = (s if s is None or isinstance(s, PipeSafe) else PipeSafe(s) for s in saved)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def say(line: str) -> None:
    """One line on stderr; where stderr's reader is gone, on the controlling terminal instead (if any)."""
    print(line, file=sys.stderr, flush=True)
    if isinstance(sys.stderr, PipeSafe) and sys.stderr.broken:
        with contextlib.suppress(OSError), open("/dev/tty", "w") as tty:
            tty.write(line + "\n")


def exit_bounded(code: int, grace_s: float = EXIT_GRACE_S) -> NoReturn:
    """Exit with `code`, and end the process with the same code if the interpreter's clean-up hangs.

    A library's exit hook can wait forever: tensorboardX closes the event writer of each trial Tune left
    open on SIGTERM, and once joined a writer thread that never got its stop message (a SIGTERMed smoke
    search printed its resume line, then waited 85 minutes). The search's own files are written by then.
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    watchdog = threading.Timer(grace_s, os._exit, [code])
    watchdog.daemon = True  # runs during the exit hooks; never keeps a healthy exit waiting
    watchdog.start()
    sys.exit(code)
