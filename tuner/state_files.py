"""OUT's append-only state files after damage: the Optuna journal and the trial ledgers (one JSON record a line).

A crash or a full disk can cut the last record short; appending onto that cut line would glue the next
record to it and lose both. Before a resumed search starts Ray, each file is checked: a partial or corrupt
last record is dropped (one line says so; that trial reruns, nothing finished is lost), and damage anywhere
else is refused in one line naming the file, with nothing changed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from trainables.config import ConfigError
from tuner.records import TrialRow

JOURNAL = "optuna.journal"


def repair_state_files(out: Path, say: Callable[[str], None]) -> None:
    """Every ledger and the journal in OUT made whole again (or ConfigError naming the file)."""
    files = sorted((out / "trials").glob("*.jsonl")) if (out / "trials").is_dir() else []
    for path in files:
        repair(path, _ledger_record, "a trial row", say)
    if (out / JOURNAL).is_file():
        repair(out / JOURNAL, _journal_record, "a study operation", say)


def repair(path: Path, valid: Callable[[bytes], bool], what: str, say: Callable[[str], None]) -> None:
    """Drop a partial or corrupt last record of `path`; refuse (ConfigError) a bad record before it."""
    data = path.read_bytes()
    lines = data.splitlines(keepends=True)
    keep = len(lines)
    if lines and (not lines[-1].endswith(b"\n") or not valid(lines[-1])):
        keep -= 1  # the last record, cut short (or garbled) by a crash or a full disk
    for number, line in enumerate(lines[:keep], start=1):
        if not valid(line):
            raise ConfigError(
                f"--resume: {path} line {number} of {len(lines)} is corrupt (not only its last record); "
                "nothing was changed: restore the file or start a new --out"
            )
    if keep == len(lines):
        return
    good = sum(len(line) for line in lines[:keep])
    with path.open("r+b") as f:
        f.truncate(good)
        f.flush()
        os.fsync(f.fileno())
    say(
        f"--resume: {path}: dropped its last record ({len(data) - good} bytes, {what} cut short by the "
        f"crash); the {keep} before it are kept"
    )


def _ledger_record(line: bytes) -> bool:
    try:
        TrialRow.model_validate_json(line)
    except ValueError:
        return False
    return True


def _journal_record(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False
