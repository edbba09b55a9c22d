"""Where a search's runs go on the cluster: one policy for every kind of run, a function of the run's spec
and the cluster (the config's resources, the trials' hardware, the probe's peaks), never of Tune's dict.

Screen runs share each GPU `speed_runs_per_gpu` ways so their compiles overlap while one at a time is timed;
the re-measure's runs go all at once where the CPUs and memory allow; a loss run takes a GPU fraction sized
from its screen run's peak; a run beside the screen takes one screen run's place."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import ray

from trainables.config import TrainConfig
from trainables.spec import TrialSpec
from tuner.config import ResourcesSection
from tuner.runs.request import Placement
from tuner.state.hardware import Hardware, ProbedBatch


def room_now(need: dict[str, float], available: dict[str, float]) -> bool:
    """Whether `available` (Ray's free resources now) holds `need`, the smallest run of a kind: runs
    beside the screen (the baseline's and the loss runs ahead) take screen places Tune does not count."""
    return all(available.get(name, 0.0) >= amount - 1e-6 for name, amount in need.items())


@dataclass(frozen=True, kw_only=True)
class PlacementPolicy:
    resources: ResourcesSection
    hw: Hardware
    cluster_cpus: int
    node_cpus: int = 0  # the CPUs of the largest node (0: as many as the cluster's): what one trial can take
    base: TrainConfig = field(default_factory=TrainConfig)  # the baseline training config
    probed: dict[str, ProbedBatch] = field(default_factory=dict)  # precision -> the probe's largest batch

    @property
    def on_gpu(self) -> bool:
        return self.hw.gpus > 0

    @property
    def memory(self) -> MemoryShares:
        return MemoryShares(self.hw, self.base, self.probed)

    def reuse_actors(self) -> bool:
        """Warm workers across trials on CPUs, except under a memory cap (an allocation failing inside
        oneDNN can leave the process unable to train again); on GPUs a fresh process per trial: CUDA-graph
        trees left by one compiled run fail an assertion in the next run's in the same process."""
        return not self.on_gpu and not self.base.memory_cap_mb

    # --- speed runs ---
    def speed(self) -> Placement:
        """Screen runs. On GPUs, `speed_runs_per_gpu` share each GPU so their compile and warm-up overlap,
        while the timing gate lets only one at a time be timed; a batch near the probe's bound gets the GPU's
        memory to itself. On CPUs, one run at a time with every core of a node (a trial cannot span nodes)."""
        if not self.on_gpu:
            return self._cpu_speed()
        per_gpu, cpus = self.speed_runs_per_gpu(), self.resources.cpus_per_trial
        return Placement(
            lambda config: {"cpu": cpus, "gpu": self.memory.spec_share(TrialSpec.as_asked(config), per_gpu)},
            per_gpu * self.hw.gpus,
            self.reuse_actors(),
            room=lambda: room_now({"CPU": cpus, "GPU": 1 / per_gpu}, ray.available_resources()),
        )

    def remeasure(self, asked: Sequence[int], peaks_mb: Sequence[float | None]) -> Placement:
        """The re-measure's runs (`asked[i]` of the case whose screen run peaked at `peaks_mb[i]`), all at once
        where the CPUs and memory allow: their warm-ups (cache hits) overlap, then their `quiet` windows take
        turns, each waiting until no run on its GPU is compiling (a launch-bound run loses speed to compiles
        on the CPUs it launches from). In waves of `speed_runs_per_gpu`, every wave waited for its slowest
        warm-up: 186 s for 15 runs on one H100 (docs/benchmarks.md). Each GPU takes an even part, so a
        config's repeats land on several GPUs. The shares only schedule (no run is capped): where any
        `per_gpu` of the runs fit one GPU's memory together, each takes an even share; else a case's share is
        its measured peak memory, not the probe's bound (the space's largest batch when everything fits)."""
        if not self.on_gpu:
            return self._cpu_speed()
        runs = sum(asked)
        gpus = max(1, self.hw.gpus)
        cpus_per_gpu = max(1, int(self.cluster_cpus / gpus))
        per_gpu = max(1, min(math.ceil(runs / gpus), cpus_per_gpu))
        cpus = max(1, min(self.resources.cpus_per_trial, cpus_per_gpu // per_gpu))
        even = self.memory.even_shares_fit(asked, peaks_mb, per_gpu)

        def resources(config: dict[str, Any]) -> dict[str, float]:
            spec = TrialSpec.as_asked(config)  # sizing only: the trial itself refuses a bad config
            case = spec.labels.case
            assert case is not None  # each re-measure config names its case
            peak = peaks_mb[case]  # None: the baseline, not screened
            need = self.memory.memory_need(peak) if peak else None
            if even:
                share = 1 / per_gpu
            elif need is not None:
                share = _share(need, per_gpu)
            else:
                share = self.memory.spec_share(spec, per_gpu)
            return {"cpu": cpus, "gpu": share}

        return Placement(resources, per_gpu * gpus, self.reuse_actors())

    def beside_share(self, case: dict[str, Any]) -> float:
        """A run trained beside the screen takes one screen run's place on its GPU (or more, as a screen run
        of its batch would): its GPU share, and its memory cap."""
        per_gpu = self.speed_runs_per_gpu()
        forward = min(case.get("micro_batch") or case.get("batch_size", 1), case.get("batch_size", 1))
        return self.memory.batch_share(forward, case.get("precision"), per_gpu)

    def room_beside(self, runs: int = 1) -> bool:
        """Whether `runs` loss runs may train beside the screen: on GPUs with more speed-run places than that
        (each takes one from the screen, which keeps at least one)."""
        return self.on_gpu and self.speed().concurrent >= runs + 1

    def speed_runs_per_gpu(self) -> int:
        r, cpus_per_gpu = self.resources, self.cluster_cpus / max(1, self.hw.gpus)
        return max(1, min(r.speed_runs_per_gpu, int(cpus_per_gpu // r.cpus_per_trial)))

    # --- loss runs ---
    def loss_round(self) -> Placement:
        """A loss-check round: full-budget runs, each on its own GPU share (its spec's placement)."""
        cpus = self.resources.cpus_per_trial
        if not self.on_gpu:
            return Placement({"cpu": cpus}, self._loss_slots(), self.reuse_actors())
        return Placement(
            lambda config: {"cpu": cpus, "gpu": TrialSpec.as_asked(config).placement.gpu_share or 1.0},
            self._loss_slots(),
            self.reuse_actors(),
        )

    def loss_share(self, screened_peak_mb: float | None) -> float | None:
        """GPU fraction for a loss run: the configured share, or more when the config's screen run peaked
        above it (with 25% headroom), rounded up to 1/k so runs pack evenly. Its memory cap is the same."""
        if not self.on_gpu:
            return None
        need = (screened_peak_mb or 0) * 1.25 / max(1, self.hw.gpu_mem_mb or 1)
        share = max(self.resources.loss_check_gpu_fraction, need)
        return 1.0 if share > 0.5 else 1.0 / int(1.0 / share)

    def _loss_slots(self) -> int:
        """How many loss-check runs fit at once on the cluster."""
        r = self.resources
        if self.on_gpu:
            slots = int(self.hw.gpus / r.loss_check_gpu_fraction)
        else:
            slots = int(self.cluster_cpus / r.cpus_per_trial)
        return max(1, min(slots, r.max_concurrent or slots))

    def _cpu_speed(self) -> Placement:
        return Placement({"cpu": max(1, self.node_cpus or self.cluster_cpus)}, 1, self.reuse_actors())


@dataclass(frozen=True)
class MemoryShares:
    """The share of a GPU's memory a run needs: from its screen run's peak where one was measured, else the
    batch probe's peak at its largest batch scaled to the run's, with 25% headroom."""

    hw: Hardware
    base: TrainConfig  # the baseline: the unscreened run whose need the probe tells
    probed: dict[str, ProbedBatch]  # precision -> the probe's largest batch

    def even_shares_fit(self, asked: Sequence[int], peaks_mb: Sequence[float | None], per_gpu: int) -> bool:
        """Whether even shares are safe: the `per_gpu` largest runs fit one GPU's memory (25% headroom each),
        so any `per_gpu` of them that Ray puts on one GPU do. On one
        H200, shares rounded up to fifteenths (7.9 GB -> 2/15) summed to 18/15, and three of the 15 runs
        waited ~55 s for a place while the runs on the GPU needed 0.47 of its memory at most."""
        base = self.probed_need(self.base.forward_batch, self.base.precision)
        needs = [self.memory_need(p) if p else base for p in peaks_mb]  # no peak: the unscreened baseline
        known = [n for n in needs if n is not None]
        if len(known) < len(needs):
            return False
        runs = sorted((n for n, count in zip(known, asked, strict=True) for _ in range(count)), reverse=True)
        return sum(runs[:per_gpu]) <= 1.0

    def spec_share(self, spec: TrialSpec, per_gpu: int) -> float:
        # what must fit is one forward pass: the micro-batch where the batch runs in pieces
        return self.batch_share(spec.train.forward_batch, spec.train.precision, per_gpu)

    def batch_share(self, batch: int, precision: str | None, per_gpu: int) -> float:
        """1/per_gpu of a GPU, or more for a batch whose memory needs it, rounded up to a multiple of
        1/per_gpu so runs pack evenly: the probe's peak at its largest batch, scaled to this batch (+25%),
        against the GPU's memory; without a peak, the batch against the probe's largest. A screen on 4
        H200s that sized shares by batch / 512 (everything fitted) gave batch 512 a whole GPU, and 14 runs
        fitted where 24 were asked for."""
        probed = None if precision is None else self.probed.get(precision)
        if precision is None or probed is None or not probed.batch:
            return _share(0.0, per_gpu)
        need = self.probed_need(batch, precision)
        return _share(need if need is not None else batch / probed.batch, per_gpu)

    def probed_need(self, batch: int, precision: str) -> float | None:
        """The share of a GPU's memory a run of `batch` at `precision` needs by the probe: the peak at the
        probe's largest batch, scaled to this one (None: the probe measured no peak)."""
        probed = self.probed.get(precision)
        if probed is None or not probed.batch or not probed.peak_mb:
            return None
        return self.memory_need(probed.peak_mb * batch / probed.batch)

    def memory_need(self, peak_mb: float) -> float | None:
        """The share of a GPU's memory that holds `peak_mb` with 25% headroom (None: the size is unknown)."""
        return peak_mb * 1.25 / self.hw.gpu_mem_mb if self.hw.gpu_mem_mb else None


def spread(cases: list[TrialSpec], gpus: int, beside: int = 0) -> list[TrialSpec]:
    """Each run of a loss round takes at least 1/ceil(runs / GPUs) of a GPU, so the round's runs spread
    evenly over the GPUs: Ray fills one GPU's fractions before the next (on two H100s, four quarter-GPU
    runs trained on GPU 0 at 151-193K tok/s while GPU 1 trained one at 575K, and the round lasted as
    long as GPU 0's). `beside`: runs still training outside the round (the baseline's), counted so every
    run of the round finds a place at once (else, on 2 H200s, the fourth of four half-GPU runs waits for
    a place beside the baseline's run, and the round takes 115 s instead of ~50)."""
    if not gpus:
        return cases
    floor = 1.0 / math.ceil((len(cases) + beside) / gpus)
    return [c.with_placement(gpu_share=max(c.placement.gpu_share or 0.0, floor)) for c in cases]


def _share(need: float | None, per_gpu: int) -> float:
    """`need` (a share of a GPU) rounded up to a multiple of 1/per_gpu, at least one, at most the GPU."""
    return min(per_gpu, max(1, math.ceil((need or 0.0) * per_gpu))) / per_gpu
