"""What every phase of a search works with, set up once by `pipeline.open_context` and frozen after: the
config, the baseline fitted to the hardware and the space trimmed to it, the cluster the trials run on, the
telemetry handles, the durable state in OUT, and the notices for the report.

Nothing assigns into a context: a phase whose result the later ones read (the batch probe's peaks) hands
them a new one (`with_probed`). Two members are handles, not values: `state` (OUT/state.json, which each
finished phase extends) and `notices` (the report's notices, said as they come).

A phase is a plain function of the typed inputs the pipeline builds from a context; `SearchContext.phase`
runs it once and records its result in OUT/state.json (tuner/state/search_state.py), so `--resume` skips
finished phases.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from trainables.common.progress import log
from trainables.config import TrainConfig
from trainables.workloads.workload import WorkloadInfo
from tuner.config import SearchConfig
from tuner.rules.horizon import horizon_for
from tuner.runs.observe import Telemetry
from tuner.runs.placement import PlacementPolicy
from tuner.runs.request import TrialInputs
from tuner.runs.shapes import RunShapes
from tuner.state.hardware import Hardware, ProbedBatch
from tuner.state.search_state import State

T = TypeVar("T")


class Notices(list):
    """The report's notices, in the order they were said; each is logged as it comes."""

    def say(self, msg: str) -> None:
        self.append(msg)
        log(f"notice: {msg}")


@dataclass(frozen=True, kw_only=True)
class SearchContext:
    cfg: SearchConfig
    out: Path
    # the baseline training config, with the knobs the hardware leaves one choice applied (pipeline.with_fixed);
    # as a mapping (to merge knobs over, or for the rules over knob dicts): base.model_dump()
    base: TrainConfig
    hw: Hardware
    cluster_cpus: int
    state: State
    command: str
    resume: bool = False
    telemetry: Telemetry = field(default_factory=Telemetry)
    notices: Notices = field(default_factory=Notices)
    probed: dict[str, ProbedBatch] = field(default_factory=dict)  # precision -> the probe's largest batch
    compile_cache: str | None = None  # the Inductor/Triton caches the trials share, when the search's own
    node_cpus: int = 0  # the CPUs of the largest node (0: as many as the cluster's): what one trial can take
    workload: WorkloadInfo | None = None  # what the workload implements (the knobs it lacks are left out)
    inputs: TrialInputs = field(default_factory=TrialInputs)  # what every trial gets through Ray (the corpus)
    space: dict[str, Any] = field(default_factory=dict)  # the space trimmed to the trials' hardware

    @property
    def knobs_left_out(self) -> list[str]:
        """The workload knobs this search's workload does not implement."""
        return self.workload.unsupported if self.workload else []

    def notice(self, msg: str) -> None:
        self.notices.say(msg)

    def phase(self, name: str, run: Callable[[], T], kind: Any) -> T:
        """`run()` once per search: its result (of type `kind`) is kept in state.json for --resume."""
        return self.state.run_phase(name, run, kind)

    def with_probed(self, probed: dict[str, ProbedBatch]) -> SearchContext:
        """The context of the phases after the batch probe: its peaks size their GPU shares."""
        return replace(self, probed=probed)

    # --- how a phase's trials take the cluster ---
    @property
    def on_gpu(self) -> bool:
        return self.hw.gpus > 0

    @property
    def placement(self) -> PlacementPolicy:
        """Where this search's runs go: the cluster, the trials' hardware and the probe's peaks so far."""
        return PlacementPolicy(
            resources=self.cfg.resources,
            hw=self.hw,
            cluster_cpus=self.cluster_cpus,
            node_cpus=self.node_cpus,
            base=self.base,
            probed=self.probed,
        )

    @property
    def shapes(self) -> RunShapes:
        """The shape of each kind of run of this search (tuner/runs/shapes.py)."""
        s = self.cfg.search
        return RunShapes(
            self.base, s.screen_steps, horizon_for(self.base, s.space, self.cfg.quality.loss_horizon)
        )
