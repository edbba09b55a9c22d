"""OUT's state files after damage: the Optuna journal and the trial ledgers (one JSON record a line), and
state.json.

A crash or a full disk can cut the last record short; appending onto that cut line would glue the next
record to it and lose both. Before a resumed search starts Ray, each file is checked: a partial or corrupt
last record is dropped (one line says so; that trial reruns, nothing finished is lost), and damage anywhere
else is refused in one line naming the file, with nothing changed.

A damaged state.json (garbage, cut, no valid config) is rebuilt on --resume (`rebuild_state`): it keeps only
what is safe to keep, the config (its own where that still reads, else this command's, which --resume
checks against the trials' rows), and marks no phase finished. Every phase then runs again and takes its
finished trials from its ledger and the study from the journal: a finished phase reruns none of its trials,
and no phase is ever skipped on a record that could be wrong.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from trainables.common.errors import first_line
from trainables.common.files import write_atomically
from trainables.config import ConfigError
from tuner.config import SearchConfig
from tuner.state.records import TrialRow

JOURNAL = "optuna.journal"
STATE = "state.json"
DAMAGED_STATE = "state.json.damaged"  # the damaged file, kept beside the rebuilt one
# Training-config fields every trial of one search shares (unless searched): rows that differ in one of them
# were trained by another search, whose config this command is not.
SHARED_FIELDS = ("workload", "model", "seq_len", "data_sha256")


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


def rebuild_state(
    out: Path, asked: SearchConfig, data_sha256: str | None, say: Callable[[str], None]
) -> bool:
    """OUT/state.json rebuilt where it is damaged: its config kept where it still reads, else `asked` (this
    command's, with the corpus the trials trained on), no phase marked finished. Returns whether it rebuilt;
    ConfigError (one line, nothing changed) where the trials in OUT were trained by other settings."""
    path = out / STATE
    if not path.is_file():
        return False
    data, problem = _read_state(path)
    if problem is None:
        return False
    rows = _all_rows(out)
    own = data.get("config") if problem != "no valid config" else None
    config = own or _config_of_trials(asked, rows, data_sha256, path, problem)
    rebuilt = {"config": config, "phases": {}}
    if isinstance(data.get("command"), str):
        rebuilt["command"] = data["command"]
    _write_rebuilt(path, rebuilt)
    whose = "its own config" if own else "this command's config"
    say(
        f"--resume: {path} was damaged ({problem}); rebuilt with {whose} and no phase marked finished (the "
        f"damaged file: {out / DAMAGED_STATE}): every phase runs again, taking its finished trials "
        f"({len(rows)} in all) from {out / 'trials'} and the study from {out / JOURNAL}"
    )
    return True


def _read_state(path: Path) -> tuple[dict, str | None]:
    """state.json's content, and what is wrong with it (None: nothing)."""
    try:
        data = json.loads(path.read_bytes())
    except (ValueError, OSError) as err:  # UnicodeDecodeError is a ValueError
        return {}, f"not JSON: {first_line(err)}"
    if not isinstance(data, dict):
        return {}, "not a JSON object"
    if not isinstance(data.get("config"), dict) or not _valid_config(data["config"]):
        return data, "no valid config"
    if not isinstance(data.get("phases"), dict):
        return data, "no valid record of its phases"
    return data, None


def _valid_config(config: dict) -> bool:
    try:
        SearchConfig(**config)
    except (ValueError, TypeError):
        return False
    return True


def _all_rows(out: Path) -> list[TrialRow]:
    rows = []
    for path in sorted((out / "trials").glob("*.jsonl")) if (out / "trials").is_dir() else []:
        for line in path.read_bytes().splitlines():
            if _ledger_record(line):
                rows.append(TrialRow.model_validate_json(line))
    return rows


def _config_of_trials(
    asked: SearchConfig, rows: list[TrialRow], data_sha256: str | None, path: Path, problem: str
) -> dict:
    """`asked` (this command's config) pinned to the corpus it trains on, once the trials in OUT are seen to
    share its settings; else ConfigError saying how to go on."""
    config = asked.model_dump()
    config["train"] = {**config["train"], "data_sha256": config["train"].get("data_sha256") or data_sha256}
    mine = {**asked.train.model_dump(), "data_sha256": config["train"]["data_sha256"]}
    searched = set(asked.search.space)
    for row in rows:
        for field in (f for f in SHARED_FIELDS if f not in searched):
            theirs = (row.train or {}).get(field)
            if theirs is not None and theirs != mine.get(field):
                raise ConfigError(
                    f"--resume: {path} is damaged ({problem}), and the trials in {path.parent / 'trials'} "
                    f"were trained with another {field} than this command's ({_short(theirs)}, not "
                    f"{_short(mine.get(field))}): pass the --config, --set and --data that started the search "
                    "to rebuild it, or start a new --out; nothing was changed"
                )
    return config


def _short(value: object) -> str:
    text = str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _write_rebuilt(path: Path, data: dict) -> None:
    try:
        shutil.copyfile(path, path.with_name(DAMAGED_STATE))
        # last: until it lands the damaged file stands, and --resume finds it again
        write_atomically(path, json.dumps(data, indent=1, default=str))
    except OSError as err:
        raise ConfigError(f"--resume: cannot rebuild {path} ({err.strerror or err})") from None
