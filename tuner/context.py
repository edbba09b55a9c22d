"""What every phase of a search works with, set up in one place: the config, the hardware the trials run on,
the telemetry handles, the durable state in OUT, and the notices for the report.

A phase is a plain function `run(ctx, ...)` over a `SearchContext`; `SearchContext.phase` runs it once and
records its result in OUT/state.json, so `--resume` skips finished phases.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import TypeAdapter

from tuner.config import SearchConfig
from tuner.records import Hardware

T = TypeVar("T")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class State:
    """OUT/state.json: the search's inputs and each finished phase's result, written atomically."""

    def __init__(self, out: Path):
        self.path = out / "state.json"
        self.data: dict[str, Any] = (
            json.loads(self.path.read_text()) if self.path.exists() else {"phases": {}}
        )

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str))
        tmp.replace(self.path)

    def phase(self, name: str) -> Any:
        return self.data["phases"].get(name)

    def finish(self, name: str, value: Any, seconds: float) -> None:
        self.data["phases"][name] = value
        self.data.setdefault("timings", {})[name] = round(seconds, 1)
        self.save()

    @property
    def timings(self) -> dict[str, float]:
        return dict(self.data.get("timings", {}))


@dataclass
class Telemetry:
    """The NVML sampler actors by Ray node id, and why telemetry is missing (None when it is complete)."""

    actors: dict[str, Any] = field(default_factory=dict)
    notice: str | None = None

    @property
    def available(self) -> bool:
        return bool(self.actors) and self.notice is None


@dataclass
class SearchContext:
    cfg: SearchConfig
    out: Path
    base: dict[str, Any]  # the baseline training config, with knobs fixed by the hardware applied
    hw: Hardware
    cluster_cpus: int
    state: State
    command: str
    resume: bool = False
    telemetry: Telemetry = field(default_factory=Telemetry)
    notices: list[str] = field(default_factory=list)

    def notice(self, msg: str) -> None:
        self.notices.append(msg)
        log(f"notice: {msg}")

    def phase(self, name: str, run: Callable[[], T], kind: Any) -> T:
        """`run()` once per search: its result (of type `kind`) is kept in state.json for --resume."""
        adapter = TypeAdapter(kind)
        done = self.state.phase(name)
        if done is not None:
            log(f"[{name}] already done (from {self.state.path})")
            return adapter.validate_python(done)
        log(f"[{name}] starting")
        started = time.time()
        value = run()
        self.state.finish(name, adapter.dump_python(value, mode="json"), time.time() - started)
        return value

    # --- resources of one trial ---
    @property
    def on_gpu(self) -> bool:
        return self.hw.gpus > 0

    def exclusive(self) -> dict[str, float]:
        """A whole GPU, or the whole CPU share: speed is never measured shared."""
        if self.on_gpu:
            r = self.cfg.resources
            return {"cpu": r.cpus_per_trial, "gpu": r.gpus_per_trial}
        return {"cpu": max(1, self.cluster_cpus)}

    def reuse_actors(self) -> bool:
        """Warm workers across trials, except under a CPU memory cap: an allocation failing inside a native
        library (oneDNN) can leave that process unable to run the next trial."""
        return self.on_gpu or not self.base.get("memory_cap_mb")

    def short_run(self, knobs: dict[str, Any]) -> dict[str, Any]:
        """A short exclusive speed run of baseline + knobs: a fixed number of steady steps, a token eval."""
        steps = self.cfg.search.screen_steps
        return {
            **self.base,
            **knobs,
            "max_steps": self.base["timing_warmup_steps"] + steps,
            "eval_interval": 0,
            "eval_tokens": self.base["seq_len"] * self.base["eval_batch_size"],
            "log_interval": max(1, steps // 4),
            "out_dir": None,
        }
