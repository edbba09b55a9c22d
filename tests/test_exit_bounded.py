"""The search's exit cannot hang on a library's exit hook (tuner/session/streams.py: exit_bounded)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def exit_with(code: int, hook: str) -> tuple[int, float, str]:
    script = (
        "import atexit, threading\n"
        f"{hook}\n"
        "from tuner.session.streams import exit_bounded\n"
        "print('the last line', flush=False)\n"
        f"exit_bounded({code}, grace_s=1.0)\n"
    )
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    return done.returncode, time.monotonic() - start, done.stdout


def test_an_exit_hook_that_waits_forever_ends_with_the_same_code_after_the_grace():
    code, took, out = exit_with(130, "atexit.register(threading.Event().wait)")  # as tensorboardX's join did
    assert code == 130 and out == "the last line\n"
    assert took < 30  # the grace (1 s) plus the interpreter's start, not the 60 s timeout


def test_a_healthy_exit_is_not_held_by_the_grace():
    code, took, out = exit_with(3, "atexit.register(print, 'hook ran')")
    assert code == 3 and out == "the last line\nhook ran\n"  # the hooks still run
