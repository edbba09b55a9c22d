"""The records of how a search used its GPUs, read from the telemetry: each GPU's use over the search and
its phases, and whether the GPUs of one host time a config alike (tuner/telemetry/gpus.py makes them; Summary
carries them, so they are part of docs/summary.schema.json)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from tuner.rules.record_base import Record

# The names these records give what they span (tuner/telemetry/gpus.py fills them, the report reads them):
SEARCH = "search"  # a GpuUsage phase: the span of every phase together
# Where a row's phase ran when its name says otherwise: the baseline's loss run is in the loss check's round 0.
RAN_IN = {"baseline": "loss_check"}
POOLED = "all finalists"  # a GpuComparison's config_id: every finalist's runs pooled


class TelemetrySummary(Record):
    available: bool = False
    notice: str | None = None
    timelines: dict[str, list[dict[str, Any]]] = Field(default_factory=dict)


class UsageStats(Record):
    """One GPU over one span of the search (a phase, or all of it), from the telemetry sampler's readings."""

    span_s: float = Field(description="the span's length, seconds")
    samples: int = Field(0, description="readings in the span")
    covered_s: float | None = Field(None, description="seconds from the span's first reading to its last")
    util_mean: float | None = Field(None, description="NVML GPU utilisation (share of time a kernel ran), %")
    util_median: float | None = None
    mem_util_mean: float | None = Field(None, description="memory-controller utilisation, %")
    mem_used_mean_mb: float | None = None
    mem_used_median_mb: float | None = None
    mem_used_peak_mb: float | None = None


class GpuUsage(Record):
    """One GPU of a node, over the search and over each phase."""

    node_id: str | None = None
    gpu: int = Field(description="NVML index (the trials' `gpu`)")
    name: str | None = None
    spans: dict[str, UsageStats] = Field(
        default_factory=dict, description='"search" (every phase) and each phase, in the order they ran'
    )


GpuVerdict = Literal["one population", "differ", "too few runs"]


class GpuSpeed(Record):
    """One config's re-measure runs on one GPU."""

    gpu: int
    runs: list[float] = Field(default_factory=list, description="tok/s of each run (pooled: relative)")
    median: float


class GpuComparison(Record):
    """A config's speed on each GPU of a host, its fastest GPU's against its slowest's, in the selection's
    noise band: select.pick_winner ties two configs whose re-measure ranges [min, max] overlap."""

    config_id: str = Field(
        description="a finalist, or 'all finalists': each one's runs / the mean of its GPUs' medians"
    )
    gpus: list[GpuSpeed] = Field(default_factory=list)
    gap: float = Field(description="(fastest GPU's median - slowest GPU's) / slowest GPU's")
    noise: float | None = Field(
        None,
        description="how far those two GPUs' run ranges reach toward each other, / the slowest's median: "
        "the ranges overlap (tied, as the selection ties configs) while gap <= noise; None: too few runs",
    )
    verdict: GpuVerdict


class GpuPopulation(Record):
    """Whether the GPUs of one host time a config alike, as the search assumes (it pools a finalist's runs
    from every GPU into one median): each finalist compared across GPUs, and all of them pooled."""

    node_id: str | None = None
    gpus: list[int] = Field(default_factory=list)
    verdict: GpuVerdict = Field(description="the pooled comparison's")
    pooled: GpuComparison
    configs: list[GpuComparison] = Field(default_factory=list)
