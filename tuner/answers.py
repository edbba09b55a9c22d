"""Remembered answers: a search that matches one already finished on this machine confirms that answer
instead of searching again.

A finished search leaves its probe, screen and loss-check results in the cache dir under a fingerprint of
everything that decides them: the config (train, with the corpus's sha256; search space and settings;
quality), the trials' hardware (GPU, node, torch, kernels), the project's and the workload's code. A new
search with the same fingerprint takes those phases as done (they go into its state.json as a resumed
search's would) and runs the re-measure alone: the finalists and the baseline, timed again, so the answer
is confirmed on today's machine, not copied. `--fresh` (or TUNER_FRESH=1, which the test suite sets)
searches anew.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from trainables.data import corpus_cache_dir
from trainables.files import write_atomically
from tuner.config import SearchConfig
from tuner.records import Hardware

REMEMBERED_PHASES = ("probe", "screen", "loss_check")  # what a confirmation takes from the earlier search
PROJECT = Path(__file__).resolve().parents[1]
CODE_DIRS = ("model", "trainables", "tuner")
MAX_CODE_FILES = 2000  # a workload imported from a large tree: its first files stand for it


def answers_dir(cache_dir: str | Path | None = None) -> Path:
    """Beside the compile caches: the user cache dir, or the search's --cache-dir (shared storage)."""
    return (Path(cache_dir) if cache_dir else corpus_cache_dir()) / "answers"


def fingerprint(cfg: SearchConfig, hw: Hardware, workload_root: str | None) -> str:
    """What decides a search's screen and loss check, hashed: equal fingerprints, the same search."""
    blob = {
        "config": cfg.model_dump(mode="json"),
        "hardware": hw.model_dump(mode="json"),
        "code": code_digest(
            [PROJECT / d for d in CODE_DIRS] + ([Path(workload_root)] if workload_root else [])
        ),
    }
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:24]


def code_digest(roots: list[Path]) -> str:
    """The .py files under `roots`, by path and content: any change to the code is a new search."""
    h = hashlib.sha256()
    for root in roots:
        for path in sorted(root.rglob("*.py"))[:MAX_CODE_FILES]:
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def fresh_asked(flag: bool) -> bool:
    return flag or os.environ.get("TUNER_FRESH") == "1"


def recall(folder: Path, key: str) -> dict[str, Any] | None:
    """The earlier search's record (out, when, phases), or None (none, or unreadable: then search anew)."""
    path = folder / f"{key}.json"
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or set(REMEMBERED_PHASES) - set(record.get("phases", {})):
        return None
    return record


def remember(folder: Path, key: str, out: Path, phases: dict[str, Any]) -> Path:
    """Kept for the next search with this fingerprint (written whole, then renamed: never half a record)."""
    folder.mkdir(parents=True, exist_ok=True)
    record = {
        "out": str(out.resolve()),
        "when": time.strftime("%Y-%m-%d %H:%M", time.localtime()),
        "phases": {name: phases[name] for name in REMEMBERED_PHASES},
    }
    path = folder / f"{key}.json"
    write_atomically(path, json.dumps(record))
    return path
