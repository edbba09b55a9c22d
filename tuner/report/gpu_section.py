"""The GPUs section of both reports: how busy each GPU was in each phase, and whether the GPUs of a host time
a config alike (the search pools every GPU's runs of a config into one median, as if they did)."""

from __future__ import annotations

from dataclasses import dataclass

from tuner.report.fmt import DASH, fmt_mem, fmt_tps, is_num
from tuner.state.gpu_records import POOLED, RAN_IN, SEARCH, GpuComparison, GpuPopulation, GpuUsage, UsageStats
from tuner.state.records import Summary, TrialRow, short_node_id

USAGE_HEAD = (
    "Phase", "GPU", "Runs finished", "Util mean", "Util median", "Memory mean", "Memory median", "Readings"
)  # fmt: skip
SPAN_NAMES = {SEARCH: "whole search"}
WELL_COVERED = (
    0.9  # readings spanning less of a phase than this are pointed out (the sampler's history ran out)
)


@dataclass(frozen=True)
class Population:
    """One host's GPUs compared: the sentence that answers, and the table behind it."""

    sentence: str
    notice: str | None  # for Notices, where the GPUs differ beyond the noise
    head: list[str]
    rows: list[list[str]]


@dataclass(frozen=True)
class Gpus:
    """The section: where (the node, named once when there is one), GPU use per phase, populations."""

    intro: str
    usage: list[list[str]]
    populations: list[Population]

    @property
    def notices(self) -> list[str]:
        """What the reports also list under Notices: GPUs that differ beyond the noise."""
        return [p.notice for p in self.populations if p.notice]


def _nodes(summary: Summary) -> list[str | None]:
    found = [u.node_id for u in summary.gpu_usage] + [p.node_id for p in summary.gpu_population]
    return list(dict.fromkeys(found))


def _gpu_label(gpu: int, node_id: str | None, one_node: bool) -> str:
    return f"GPU {gpu}" if one_node else f"GPU {gpu} of node {short_node_id(node_id)}"


def _pct(value: float | None) -> str:
    return f"{value:.0f}%" if is_num(value) else DASH


def _readings(stats: UsageStats) -> str:
    covered = stats.covered_s / stats.span_s if is_num(stats.covered_s) and stats.span_s > 0 else 0.0
    part = f" (over {covered:.0%} of it)" if stats.samples and covered < WELL_COVERED else ""
    return f"{stats.samples:,}{part}"


def _finished(trials: list[TrialRow], span: str, u: GpuUsage) -> str:
    """How many runs of the span ended on this GPU (the screen's: the proposals it finished), failures apart."""
    if span == "probe":
        return DASH  # the probe leaves no rows
    mine = [
        t for t in trials
        if t.gpu == u.gpu and (t.node_id == u.node_id or u.node_id is None)
        and span in (SEARCH, RAN_IN.get(t.phase_name, t.phase_name))
    ]  # fmt: skip
    failed = sum(1 for t in mine if t.failed)
    return f"{len(mine) - failed}" + (f" (+{failed} failed)" if failed else "")


def _usage_rows(usage: list[GpuUsage], trials: list[TrialRow], one_node: bool) -> list[list[str]]:
    spans = list(dict.fromkeys(name for u in usage for name in u.spans))
    spans = [s for s in spans if s != SEARCH] + [s for s in spans if s == SEARCH]
    rows = []
    for span in spans:
        for u in usage:
            stats = u.spans.get(span)
            if stats is not None:
                rows.append(
                    [
                        SPAN_NAMES.get(span, span),
                        _gpu_label(u.gpu, u.node_id, one_node),
                        _finished(trials, span, u),
                        _pct(stats.util_mean),
                        _pct(stats.util_median),
                        fmt_mem(stats.mem_used_mean_mb),
                        fmt_mem(stats.mem_used_median_mb),
                        _readings(stats),
                    ]
                )
    return rows


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" and {items[-1]}"


def _gpus(pop: GpuPopulation, one_node: bool) -> str:
    where = "" if one_node else f" of node {short_node_id(pop.node_id)}"
    return f"GPUs {_and([str(g) for g in pop.gpus])}{where}"


def _notice(pop: GpuPopulation, one_node: bool) -> str | None:
    c = pop.pooled
    if c.verdict != "differ":
        return None
    return (
        f"{_gpus(pop, one_node)} differ beyond the noise ({c.gap:.1%} apart at the median, noise band "
        f"{c.noise:.1%}), but the search pools their runs as one population: see GPUs."
    )


def _sentence(pop: GpuPopulation, one_node: bool) -> str:
    gpus, c = _gpus(pop, one_node), pop.pooled
    if c.verdict == "too few runs":
        return (
            f"{gpus}: too few re-measure runs on each (two or more) to tell whether they time configs alike; "
            "the search pools them as one population."
        )
    slow, fast = min(c.gpus, key=lambda s: s.median), max(c.gpus, key=lambda s: s.median)
    apart = f"the same configs ran {c.gap:.1%} faster on GPU {fast.gpu} than on GPU {slow.gpu} at the median"
    if c.verdict == "one population":
        return (
            f"{gpus}: one population. {apart[0].upper()}{apart[1:]}, within the noise band of {c.noise:.1%} (their "
            "re-measure ranges overlap, as tied configs' do), so pooling each config's runs on every GPU into "
            "one median is sound."
        )
    return (
        f"{gpus} differ beyond the noise: {apart} (noise band {c.noise:.1%}: their re-measure ranges do not "
        "overlap, where the selection would call two configs different). The search treats them as one "
        f"population (a config's Tok/s is the median of its runs on every GPU), so a config timed more often "
        f"on GPU {fast.gpu} looks faster than it is: compare the finalists' medians per GPU."
    )


def _speed(c: GpuComparison, gpu: int) -> str:
    found = next((s for s in c.gpus if s.gpu == gpu), None)
    if found is None:
        return DASH
    median = f"{found.median - 1:+.1%}" if c.config_id == POOLED else fmt_tps(found.median)
    return f"{median} ({len(found.runs)} run{'' if len(found.runs) == 1 else 's'})"


def _population(pop: GpuPopulation, one_node: bool) -> Population:
    head = ["Config", *(f"GPU {g}" for g in pop.gpus), "Gap", "Noise band", "Verdict"]
    rows = [
        [
            c.config_id if c.config_id != POOLED else f"{POOLED} (each vs its GPUs' mean)",
            *(_speed(c, g) for g in pop.gpus),
            f"{c.gap:.1%}",
            f"{c.noise:.1%}" if c.noise is not None else DASH,
            c.verdict,
        ]
        for c in (*pop.configs, pop.pooled)
    ]
    return Population(_sentence(pop, one_node), _notice(pop, one_node), head, rows)


def gpus(summary: Summary) -> Gpus | None:
    """The GPUs section; None when the summary has neither GPU use nor GPUs to compare (one GPU, CPUs)."""
    if not summary.gpu_usage and not summary.gpu_population:
        return None
    nodes = _nodes(summary)
    one_node = len(nodes) == 1
    where = f" on node {short_node_id(nodes[0])}" if one_node and nodes[0] else ""
    intro = (
        f"How busy each GPU{where} was in each phase: NVML readings over the phase's wall time, idle "
        "stretches between runs included (a phase ends with its last timed window). Util: share of time a "
        "kernel ran; memory: used on the GPU, by any process. Runs finished: the phase's runs that ended "
        "on that GPU (in the screen, the proposals it measured), failed ones counted apart."
        if summary.gpu_usage
        else f"The GPUs{where} that re-measured the same finalists."
    )
    return Gpus(
        intro,
        _usage_rows(summary.gpu_usage, summary.trials, one_node),
        [_population(p, one_node) for p in summary.gpu_population],
    )
