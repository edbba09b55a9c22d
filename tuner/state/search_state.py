"""OUT/state.json, the search's durable record of its inputs and of each finished phase's result (so
`--resume` skips what finished), and the two errors a phase ends a search with: `SearchFailed` (it cannot go
on: one line, exit 1) and `PhaseError` (an unexpected error inside a phase, named by the phase)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import TypeAdapter

from trainables.common.files import write_atomically
from trainables.common.progress import log
from trainables.config import ConfigError

T = TypeVar("T")


class SearchFailed(RuntimeError):
    """The search cannot go on (e.g. the baseline itself fails); one line, exit 1."""


class PhaseError(RuntimeError):
    """An unexpected error inside a phase (a bug, a lost cluster): the phase it stopped, and the error."""

    def __init__(self, phase: str, error: Exception):
        super().__init__(f"{phase}: {type(error).__name__}: {error}")
        self.phase, self.error = phase, error


class State:
    """OUT/state.json: the search's inputs and each finished phase's result, written atomically."""

    def __init__(self, out: Path):
        self.path = out / "state.json"
        self.data: dict[str, Any] = (
            json.loads(self.path.read_text()) if self.path.exists() else {"phases": {}}
        )

    def save(self) -> None:
        write_atomically(self.path, json.dumps(self.data, indent=1, default=str))

    def phase(self, name: str) -> Any:
        return self.data["phases"].get(name)

    def finish(self, name: str, value: Any, seconds: float) -> None:
        self.data["phases"][name] = value
        self.data.setdefault("timings", {})[name] = round(seconds, 1)
        self.save()

    @property
    def timings(self) -> dict[str, float]:
        return dict(self.data.get("timings", {}))

    def run_phase(self, name: str, run: Callable[[], T], kind: Any) -> T:
        """`run()` once per search: its result (of type `kind`) is kept in state.json for --resume."""
        adapter = TypeAdapter(kind)
        done = self.phase(name)
        if done is not None:
            log(f"[{name}] already done (from {self.path})")
            return adapter.validate_python(done)
        log(f"[{name}] starting")
        started = time.time()
        try:
            value = run()
        except (ConfigError, SearchFailed, PhaseError):
            raise  # already says what went wrong (a nested phase's error names the inner phase)
        except Exception as err:
            raise PhaseError(name, err) from err
        self.finish(name, adapter.dump_python(value, mode="json"), time.time() - started)
        return value
