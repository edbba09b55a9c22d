"""The GPUs of the search side by side: how busy each was in each phase (from the telemetry samplers), and
whether the GPUs of one host time a config alike (from the re-measure's repeats), for summary.json.

Pure functions over the search's records and the samplers' answers, so they are tested without Ray or a GPU.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from typing import Any

from tuner.state.gpu_records import (
    POOLED,
    RAN_IN,
    SEARCH,
    GpuComparison,
    GpuPopulation,
    GpuSpeed,
    GpuUsage,
    GpuVerdict,
    UsageStats,
)
from tuner.state.records import AHEAD_PHASE, TrialRow

USAGE_PHASES = ("probe", "screen", "loss_check", "remeasure")  # in the order they run

Span = tuple[float, float]


# --- how busy each GPU was, per phase -----------------------------------------------------------------------


def phase_spans(timings: Mapping[str, float], rows: Iterable[TrialRow]) -> dict[str, Span]:
    """When each phase ran, in time.time(): its recorded wall time, ending with its last timed window (the
    probe, which leaves no trial rows, ends where the screen starts); and SEARCH, from the first to the last.
    The ends lag the phases' true ends by the seconds after their last window (eval, bookkeeping)."""
    ends: dict[str, float] = {}
    for row in rows:
        phase = RAN_IN.get(row.phase_name, row.phase_name)
        if row.window_t1 and row.phase != AHEAD_PHASE:  # trained beside the screen, not in a round
            ends[phase] = max(ends.get(phase, row.window_t1), row.window_t1)
    spans = {p: (ends[p] - timings[p], ends[p]) for p in USAGE_PHASES if p in ends and p in timings}
    if "probe" in timings and "screen" in spans:
        start = spans["screen"][0]
        spans = {"probe": (start - timings["probe"], start), **spans}
    if spans:
        spans[SEARCH] = (min(t0 for t0, _ in spans.values()), max(t1 for _, t1 in spans.values()))
    return spans


def gpu_usage(answers: Iterable[Mapping[str, Any]], rows: Iterable[TrialRow] = ()) -> list[GpuUsage]:
    """Each GPU of each node that answered (tuner.telemetry.fetch_usage) as a record, by node then index.
    With `rows`, only the GPUs a trial ran on: a sampler reads every GPU NVML sees, and a search limited by
    CUDA_VISIBLE_DEVICES does not use them all."""
    ran_on = {(row.node_id, row.gpu) for row in rows if row.gpu is not None}
    return [
        GpuUsage(
            node_id=answer.get("node_id"),
            gpu=gpu["gpu"],
            name=gpu.get("name"),
            spans={name: UsageStats(**stats) for name, stats in gpu.get("spans", {}).items()},
        )
        for answer in answers
        if answer.get("available")
        for gpu in answer.get("gpus", [])
        if not ran_on or (answer.get("node_id"), gpu["gpu"]) in ran_on
    ]


# --- whether the GPUs of a host time a config alike ---------------------------------------------------------


def _speeds(rows: Iterable[TrialRow]) -> dict[Any, dict[str, dict[int, list[float]]]]:
    """node -> finalist -> GPU -> tok/s of its successful re-measure runs there."""
    out: dict[Any, dict[str, dict[int, list[float]]]] = {}
    for row in rows:
        if row.status == "ok" and row.tokens_per_s and row.gpu is not None and row.finalist:
            node = out.setdefault(row.node_id or row.node, {})
            node.setdefault(row.finalist, {}).setdefault(row.gpu, []).append(row.tokens_per_s)
    return out


def compare(config_id: str, runs: Mapping[int, list[float]]) -> GpuComparison:
    """The config's fastest GPU (by median) against its slowest, by the selection's rule: different beyond
    the noise when their run ranges [min, max] do not overlap; each needs two runs to have a range."""
    gpus = [GpuSpeed(gpu=g, runs=r, median=statistics.median(r)) for g, r in sorted(runs.items())]
    slow, fast = min(gpus, key=lambda s: s.median), max(gpus, key=lambda s: s.median)
    gap = (fast.median - slow.median) / slow.median
    if min(len(slow.runs), len(fast.runs)) < 2:
        return GpuComparison(config_id=config_id, gpus=gpus, gap=gap, verdict="too few runs")
    reach = (fast.median - min(fast.runs)) + (max(slow.runs) - slow.median)  # toward each other
    noise = reach / slow.median
    verdict: GpuVerdict = "differ" if gap > noise else "one population"
    return GpuComparison(config_id=config_id, gpus=gpus, gap=gap, noise=noise, verdict=verdict)


def _pooled(configs: Mapping[str, Mapping[int, list[float]]]) -> dict[int, list[float]]:
    """Every finalist's runs per GPU as a share of the mean of its GPUs' medians (not of its median over all
    runs: that is one of its runs, which would put 1.0 in every GPU's range and tie them)."""
    pooled: dict[int, list[float]] = {}
    for runs in configs.values():
        center = statistics.fmean(statistics.median(speeds) for speeds in runs.values())
        for gpu, speeds in runs.items():
            pooled.setdefault(gpu, []).extend(s / center for s in speeds)
    return pooled


def gpu_population(remeasure: Iterable[TrialRow]) -> list[GpuPopulation]:
    """Per host whose GPUs re-measured the same finalists: each finalist across its GPUs and, for the
    verdict, all of them pooled (a few repeats per GPU are too few to judge one config alone)."""
    out = []
    for node, finalists in _speeds(remeasure).items():
        shared = {fid: runs for fid, runs in finalists.items() if len(runs) > 1}
        if shared:
            pooled = compare(POOLED, _pooled(shared))
            out.append(
                GpuPopulation(
                    node_id=node,
                    gpus=sorted({g for runs in shared.values() for g in runs}),
                    verdict=pooled.verdict,
                    pooled=pooled,
                    configs=[compare(fid, runs) for fid, runs in shared.items()],
                )
            )
    return out
