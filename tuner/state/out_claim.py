"""OUT claimed for one search: made writable, held by this driver alone, and an earlier search in it
continued (`--resume`, with the settings that started it) or refused; the files a search writes at its end
checked writable before it starts."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from trainables.common.errors import first_line
from trainables.common.progress import log
from trainables.config import ConfigError
from trainables.data import Corpus
from tuner.config import SearchConfig
from tuner.session.out_lock import OutLock
from tuner.state.state_files import rebuild_state, repair_state_files


def check_writable_dir(out: Path) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe_file = out / ".write-test"
        probe_file.write_text("")
        probe_file.unlink()
    except OSError as err:
        raise ConfigError(f"--out: {out} is not writable ({err.strerror or err})") from None


def claim_out(
    args: argparse.Namespace,
    out: Path,
    lock: OutLock,
    command: str,
    cfg: SearchConfig,
    corpus: Corpus | None,
) -> SearchConfig:
    """OUT made and held by this driver alone (a second driver is refused, --resume or not, naming the
    first); then its earlier search is continued (the config that started it) or refused, and repaired."""
    check_writable_dir(out)
    lock.take(command)
    if not args.resume and (out / "state.json").exists():
        raise ConfigError(
            f"--out: {out} holds an earlier search; pass --resume to continue it or pick a new OUT"
        )
    if args.resume:  # a damaged state.json is rebuilt from this command and OUT's trials, under the lock
        rebuild_state(out, cfg, corpus.sha256 if corpus else None, log)
        cfg = resumable(out, cfg)  # exactly the settings that started it
    if corpus and "data_sha256" not in cfg.train.model_fields_set:  # a resumed search keeps its own
        cfg = cfg.with_train(data_sha256=corpus.sha256)
    if args.resume and (out / "state.json").exists():
        repair_state_files(out, log)  # a record cut by the crash is dropped, never appended onto
    return cfg


def check_writable(path: Path, option: str) -> None:
    """A file the search writes at its end can be written: checked first, so no search is lost to it."""
    if path.is_dir():
        raise ConfigError(f"{option}: {path} is a directory (name a file)")
    parent = next((p for p in path.absolute().parents if p.exists()), Path("/"))
    target = path if path.exists() else parent
    if not parent.is_dir() or not os.access(target, os.W_OK):
        raise ConfigError(f"{option}: cannot write {path} ({target} is not writable)")


def resumable(out: Path, asked: SearchConfig) -> SearchConfig:
    """The config OUT's search started with, when `asked` (this command's) is the same search."""
    path = out / "state.json"
    if not path.exists():  # a retried job passes --resume from its first submission on
        log(f"--resume: {out} holds no earlier search; starting a new one")
        return asked
    try:
        saved = SearchConfig(**json.loads(path.read_text())["config"])
    except (ValueError, KeyError, TypeError) as err:
        raise ConfigError(
            f"--resume: {path} is unreadable ({first_line(err)}); nothing was changed"
        ) from None
    mine = saved.model_dump()
    mine["train"].pop("data_sha256", None)
    if asked.model_dump() != mine:
        raise ConfigError(
            f"--resume: {out} was started with other settings; pass the same --config, --set and --data "
            "as the search that made it (its command is in OUT/state.json), or a new --out"
        )
    return saved
