"""Remembered answers: a search that matches one already finished on this machine confirms that answer
instead of searching again.

A finished search leaves its probe, screen and loss-check results in the cache dir under a fingerprint of
everything that decides them: the config (train, with the corpus's sha256; search space and settings;
quality), the trials' hardware (GPU, node, torch, kernels), the project's and the workload's code. A new
search with the same fingerprint takes those phases as done (they go into its state.json as a resumed
search's would) and runs the re-measure alone: the finalists and the baseline, timed again, so the answer
is confirmed on today's machine, not copied. `--fresh` (or TUNER_FRESH=1, which the test suite sets)
searches anew.

A remembered answer is never built on untrusted figures: a search whose headline figures were untrusted or
whose screen timed a contended window is not remembered, and a record that says either is refused. It rests
on the earlier search's OUT (its `out`), which stays the evidence: the record is used only while that OUT
still holds it (summary.json, state.json with the same phases, whole trial ledgers and journal); where it
is gone or damaged, the search searches anew and says why in one line.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from trainables.common.files import corpus_cache_dir, write_atomically
from tuner.config import SearchConfig
from tuner.state.hardware import Hardware
from tuner.state.records import BASELINE_ID, TrialRow

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


def recall(folder: Path, key: str, say: Callable[[str], None] = lambda _: None) -> dict[str, Any] | None:
    """The earlier search's record (out, when, phases), or None: none, unreadable, or refused (then search
    anew): `say` hears why a record was refused (untrusted figures, its OUT gone or damaged)."""
    path = folder / f"{key}.json"
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or set(REMEMBERED_PHASES) - set(record.get("phases", {})):
        return None
    why = untrusted_why(record["phases"], bool(record.get("untrusted"))) or evidence_problem(record, key)
    if why is not None:
        say(f"the answer remembered from {record.get('out')} is not used: {why}; searching anew")
        return None
    return record


def remember(
    folder: Path, key: str, out: Path, phases: dict[str, Any], untrusted: bool = False
) -> Path | None:
    """Kept for the next search with this fingerprint (written whole, then renamed: never half a record);
    None, nothing kept, where its figures were untrusted (untrusted_why says why)."""
    if untrusted_why(phases, untrusted) is not None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    record = {
        "out": str(out.resolve()),
        "when": time.strftime("%Y-%m-%d %H:%M", time.localtime()),
        "untrusted": False,
        "phases": {name: phases[name] for name in REMEMBERED_PHASES},
    }
    path = folder / f"{key}.json"
    write_atomically(path, json.dumps(record))
    return path


def untrusted_why(phases: dict[str, Any], untrusted: bool) -> str | None:
    """Why a search's probe, screen and loss check may not stand for a later search's: its answer was
    untrusted (summary.untrusted: the winner's or the baseline's figure rests on contended windows; exit 4
    where a winner was refused for it), or a screen figure was timed while other processes contended for
    the CPUs (its report's notice said those figures are not trusted; a confirmation would drop that). A GPU shared in
    the screen does not count: the search's own loss runs train beside the screen on its GPUs by design,
    and most screens on a GPU read shared for them. Loss runs' contention does not count either: their
    speed is never used. None: trusted."""
    if untrusted:
        return "its headline figures were untrusted (the re-measure could not get uncontended windows)"
    try:
        screen = _ROWS.validate_python(phases.get("screen") or [])
    except ValueError:
        return "its screen rows do not read"
    contended = [r for r in screen if r.cpu_shared and r.tokens_per_s is not None]
    if contended:
        return (
            f"{len(contended)} of its {len(screen)} screen figures were timed while other processes "
            "contended for the CPUs (untrusted)"
        )
    return None


_ROWS = TypeAdapter(list[TrialRow])


def evidence_problem(record: dict[str, Any], key: str) -> str | None:
    """Why the earlier search's OUT no longer holds the evidence the record rests on, or None: its
    summary.json (not untrusted), its state.json (this fingerprint, the same phases), its trial ledgers and
    Optuna journal whole, and every screen and loss-check row of the record in a ledger."""
    out = Path(str(record.get("out")))
    if not out.is_dir():
        return f"its OUT {out} is gone"
    for name in ("summary.json", "state.json"):
        if not (out / name).is_file():
            return f"{out / name} is gone"
    try:
        summary = json.loads((out / "summary.json").read_text())
        state = json.loads((out / "state.json").read_text())
    except (OSError, ValueError):
        return f"{out}/summary.json or state.json does not read"
    if not isinstance(summary, dict) or not isinstance(state, dict):
        return f"{out}/summary.json or state.json is damaged"
    if summary.get("untrusted"):
        return f"{out}/summary.json says its figures were untrusted"
    if state.get("fingerprint") != key or any(
        _same(state.get("phases", {}).get(n)) != _same(record["phases"][n]) for n in REMEMBERED_PHASES
    ):
        return f"{out}/state.json no longer holds that search (another search, or rebuilt)"
    return _ledger_problem(out, record["phases"])


def _same(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)  # NaN as NaN: equal where the files are


def _ledger_problem(out: Path, phases: dict[str, Any]) -> str | None:
    """Why OUT's ledgers do not hold the record's rows (a ledger or the journal cut or missing), or None."""
    ids: set[str] = set()
    ledgers = sorted((out / "trials").glob("*.jsonl")) if (out / "trials").is_dir() else []
    journal = [out / "optuna.journal"] if (out / "optuna.journal").is_file() else []
    for path in [*ledgers, *journal]:
        data = path.read_bytes()
        if data and not data.endswith(b"\n"):
            return f"{path} is damaged (its last record is cut short)"
        try:
            records = [json.loads(line) for line in data.splitlines()]
        except ValueError:
            return f"{path} is damaged (a record does not read)"
        if path in ledgers:
            ids |= {str(r.get("id")) for r in records if isinstance(r, dict)}
    loss = phases.get("loss_check") or {}
    rows = [*(phases.get("screen") or []), *(loss.get("candidates", []) if isinstance(loss, dict) else loss)]
    named = {r.get("id") for r in rows if isinstance(r, dict) and r.get("phase") != BASELINE_ID}
    if named - ids:
        return f"{out}/trials/ holds {len(named - ids)} of its screen and loss-check trials no longer"
    return None
