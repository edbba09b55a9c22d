"""What every phase of a search works with, set up in one place: the config, the hardware the trials run on,
the telemetry handles, the durable state in OUT, and the notices for the report.

A phase is a plain function `run(ctx, ...)` over a `SearchContext`; `SearchContext.phase` runs it once and
records its result in OUT/state.json, so `--resume` skips finished phases.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import TypeAdapter

from trainables.config import ConfigError
from trainables.spec import TrialSpec
from trainables.workload import WorkloadInfo
from tuner.config import SearchConfig
from tuner.records import Hardware, ProbedBatch
from tuner.runner import Placement, TrialInputs

T = TypeVar("T")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


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
    probed: dict[str, ProbedBatch] = field(default_factory=dict)  # precision -> the probe's largest batch
    compile_cache: str | None = None  # the Inductor/Triton caches the trials share, when the search's own
    node_cpus: int = 0  # the CPUs of the largest node (0: as many as the cluster's): what one trial can take
    workload: WorkloadInfo | None = None  # what the workload implements (the knobs it lacks are left out)
    inputs: TrialInputs = field(default_factory=TrialInputs)  # what every trial gets through Ray (the corpus)

    @property
    def knobs_left_out(self) -> list[str]:
        """The workload knobs this search's workload does not implement."""
        return self.workload.unsupported if self.workload else []

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
        try:
            value = run()
        except (ConfigError, SearchFailed, PhaseError):
            raise  # already says what went wrong (a nested phase's error names the inner phase)
        except Exception as err:
            raise PhaseError(name, err) from err
        self.state.finish(name, adapter.dump_python(value, mode="json"), time.time() - started)
        return value

    # --- how a phase's trials take the cluster ---
    @property
    def on_gpu(self) -> bool:
        return self.hw.gpus > 0

    def reuse_actors(self) -> bool:
        """Warm workers across trials on CPUs, except under a memory cap (an allocation failing inside
        oneDNN can leave the process unable to train again); on GPUs a fresh process per trial: CUDA-graph
        trees left by one compiled run fail an assertion in the next run's in the same process."""
        return not self.on_gpu and not self.base.get("memory_cap_mb")

    def speed_placement(self) -> Placement:
        """Screen runs. On GPUs, `speed_runs_per_gpu` share each GPU so their compile and warm-up overlap,
        while the timing gate lets only one at a time be timed; a batch near the probe's bound gets the GPU's
        memory to itself. On CPUs, one run at a time with every core of a node (a trial cannot span nodes)."""
        if not self.on_gpu:
            return self._cpu_speed_placement()
        per_gpu, cpus = self._speed_runs_per_gpu(), self.cfg.resources.cpus_per_trial
        return Placement(
            lambda config: {"cpu": cpus, "gpu": self._speed_share(config, per_gpu)},
            per_gpu * self.hw.gpus,
            self.reuse_actors(),
            gate="turns",
        )

    def remeasure_placement(self, asked: Sequence[int], peaks_mb: Sequence[float | None]) -> Placement:
        """The re-measure's runs (`asked[i]` of the case whose screen run peaked at `peaks_mb[i]`), all at once
        where the CPUs and memory allow: their warm-ups (cache hits) overlap, then their `quiet` windows take
        turns, each waiting until no run on its GPU is compiling (a launch-bound run loses speed to compiles
        on the CPUs it launches from). In waves of `speed_runs_per_gpu`, every wave waited for its slowest
        warm-up: 186 s for 15 runs on one H100 (run J, docs/benchmarks.md). Each GPU takes an even part, so a
        config's repeats land on several GPUs. The shares only schedule (no run is capped): where any
        `per_gpu` of the runs fit one GPU's memory together, each takes an even share; else a case's share is
        its measured peak memory, not the probe's bound (the space's largest batch when everything fits)."""
        if not self.on_gpu:
            return self._cpu_speed_placement()
        runs = sum(asked)
        gpus = max(1, self.hw.gpus)
        cpus_per_gpu = max(1, int(self.cluster_cpus / gpus))
        per_gpu = max(1, min(math.ceil(runs / gpus), cpus_per_gpu))
        cpus = max(1, min(self.cfg.resources.cpus_per_trial, cpus_per_gpu // per_gpu))
        even = self._even_shares_fit(asked, peaks_mb, per_gpu)

        def resources(config: dict[str, Any]) -> dict[str, float]:
            peak = peaks_mb[TrialSpec.of_tune(config).labels.case]  # None: the baseline, not screened
            need = self._memory_need(peak) if peak else None
            if even:
                share = 1 / per_gpu
            elif need is not None:
                share = self._share(need, per_gpu)
            else:
                share = self._speed_share(config, per_gpu)
            return {"cpu": cpus, "gpu": share}

        return Placement(resources, per_gpu * gpus, self.reuse_actors(), gate="quiet")

    def _even_shares_fit(self, asked: Sequence[int], peaks_mb: Sequence[float | None], per_gpu: int) -> bool:
        """Whether even shares are safe: the `per_gpu` largest runs fit one GPU's memory (25% headroom each),
        so any `per_gpu` of them that Ray puts on one GPU do. Run N on one
        H200: shares rounded up to fifteenths (7.9 GB -> 2/15) summed to 18/15, and three of the 15 runs
        waited ~55 s for a place while the runs on the GPU needed 0.47 of its memory at most."""
        base = self._probed_need(self.base["batch_size"], self.base["precision"])
        needs = [self._memory_need(p) if p else base for p in peaks_mb]  # no peak: the unscreened baseline
        if any(n is None for n in needs):
            return False
        runs = sorted((n for n, count in zip(needs, asked, strict=True) for _ in range(count)), reverse=True)
        return sum(runs[:per_gpu]) <= 1.0

    def beside_share(self, case: dict[str, Any]) -> float:
        """A run trained beside the screen takes one screen run's place on its GPU (or more, as a screen run
        of its batch would): its GPU share, and its memory cap."""
        return self._speed_share({"train": case}, self._speed_runs_per_gpu())

    def _cpu_speed_placement(self) -> Placement:
        return Placement({"cpu": max(1, self.node_cpus or self.cluster_cpus)}, 1, self.reuse_actors())

    def _speed_runs_per_gpu(self) -> int:
        cpus_per_gpu = self.cluster_cpus / max(1, self.hw.gpus)
        return max(
            1,
            min(
                self.cfg.resources.speed_runs_per_gpu, int(cpus_per_gpu // self.cfg.resources.cpus_per_trial)
            ),
        )

    def _speed_share(self, config: dict[str, Any], per_gpu: int) -> float:
        """1/per_gpu of a GPU, or more for a batch whose memory needs it, rounded up to a multiple of
        1/per_gpu so runs pack evenly: the probe's peak at its largest batch, scaled to this batch (+25%),
        against the GPU's memory; without a peak, the batch against the probe's largest. Run K's screen on
        4 H200s sized shares by batch / 512 (everything fitted): batch 512 took a whole GPU, and 14 runs
        fitted where 24 were asked for."""
        train = config.get("train", {})
        batch = config.get("batch_size", train.get("batch_size", 1))
        precision = config.get("precision", train.get("precision"))
        probed = self.probed.get(precision)
        if probed is None or not probed.batch:
            return self._share(0.0, per_gpu)
        need = self._probed_need(batch, precision)
        return self._share(need if need is not None else batch / probed.batch, per_gpu)

    def _probed_need(self, batch: int, precision: str) -> float | None:
        """The share of a GPU's memory a run of `batch` at `precision` needs by the probe: the peak at the
        probe's largest batch, scaled to this one (None: the probe measured no peak)."""
        probed = self.probed.get(precision)
        if probed is None or not probed.batch or not probed.peak_mb:
            return None
        return self._memory_need(probed.peak_mb * batch / probed.batch)

    def _memory_need(self, peak_mb: float) -> float | None:
        """The share of a GPU's memory that holds `peak_mb` with 25% headroom (None: the size is unknown)."""
        return peak_mb * 1.25 / self.hw.gpu_mem_mb if self.hw.gpu_mem_mb else None

    @staticmethod
    def _share(need: float | None, per_gpu: int) -> float:
        """`need` (a share of a GPU) rounded up to a multiple of 1/per_gpu, at least one, at most the GPU."""
        return min(per_gpu, max(1, math.ceil((need or 0.0) * per_gpu))) / per_gpu

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
