"""One training run of bench/oracle.py: `python -m trainables.train --config FILE --json`, the command a user
runs, in its own process, one at a time (alone on the GPU), its progress flowing to this stderr.

A run may take minutes (a cold compile says nothing for a while), so a line says how long it has run at
least every HEARTBEAT_S seconds.
"""

from __future__ import annotations

import collections
import json
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.oracle_record import OracleRun, Role

ROOT = Path(__file__).resolve().parents[1]
HEARTBEAT_S = 30.0


@dataclass(frozen=True)
class RunOutput:
    """What a run's process left: its exit code, its result (the --json line; None: it wrote none), its
    wall time and the last line of its stderr (why it failed, where it did)."""

    exit_code: int
    result: dict[str, Any] | None
    wall_s: float
    last_line: str


def say(line: str) -> None:
    print(f"[oracle {time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


def train_alone(config_file: Path, label: str) -> RunOutput:
    """Train `config_file` alone; its stdout to a file beside it (a chatty workload cannot fill a pipe)."""
    cmd = [sys.executable, "-m", "trainables.train", "--config", str(config_file), "--json"]
    stdout_file = config_file.with_suffix(".stdout")
    started = time.monotonic()
    tail: collections.deque[str] = collections.deque(maxlen=1)
    with stdout_file.open("w") as stdout:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=stdout, stderr=subprocess.PIPE, text=True, bufsize=1)
        forward = threading.Thread(target=_forward, args=(proc.stderr, tail), daemon=True)
        forward.start()
        try:
            _wait(proc, label, started)
        except BaseException:  # Ctrl-C or a kill of the sitting: the run goes with it
            proc.kill()
            raise
        forward.join(timeout=5)
    return RunOutput(
        proc.returncode, _result(stdout_file), time.monotonic() - started, tail[0] if tail else ""
    )


def recorded(done: RunOutput, *, key: str, role: Role, knobs: dict[str, Any], config_file: Path) -> OracleRun:
    """The run's record: its --json result's figures; where it wrote none (exit 2 or 5, a crash), status
    error and the last line of its stderr."""
    result = done.result or {}
    status = result.get("status") or "error"
    failed = None if status == "ok" else done.last_line or f"exit {done.exit_code}"
    if done.exit_code < 0 and not done.result:  # the sitting's end took it: a rerun trains it again
        failed = f"killed by {signal.Signals(-done.exit_code).name} after {done.wall_s:.0f} s"
    return OracleRun(
        key=key,
        roles=[role],
        knobs=knobs,
        config_file=str(config_file),
        status=status,
        exit_code=done.exit_code,
        tokens_per_s=result.get("tokens_per_s"),
        unit=result.get("unit") or "tokens",
        val_loss=result.get("val_loss"),
        compile_s=result.get("compile_s"),
        wall_s=round(done.wall_s, 2),
        error=result.get("error") or failed,
    )


def _forward(stream, tail: collections.deque[str]) -> None:
    """The run's stderr to ours, line by line, keeping the last non-blank line."""
    for line in stream:
        sys.stderr.write(line)
        sys.stderr.flush()
        if line.strip():
            tail.append(line.strip())


def _wait(proc: subprocess.Popen, label: str, started: float) -> None:
    while True:
        try:
            proc.wait(timeout=HEARTBEAT_S)
            return
        except subprocess.TimeoutExpired:
            say(f"{label}: running for {time.monotonic() - started:.0f} s")


def _result(stdout_file: Path) -> dict[str, Any] | None:
    """The last JSON object line of the run's stdout (the CLI's --json line), or None."""
    lines = [line for line in stdout_file.read_text().splitlines() if line.startswith("{")]
    try:
        return json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        return None
