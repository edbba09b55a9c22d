"""The search's side of telemetry: start one NVML sampler per GPU node, then join each finished trial to the
GPU samples of its timed window and flag speed figures taken while the host's CPUs were contended. The join
is the last step of recording a finished run (tuner/runs/scheduler.py:RunScheduler.record); the samplers and
the join's maths are tuner/telemetry's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import ray
from tensorboardX import SummaryWriter

from tuner.runs.request import Role
from tuner.state.records import TrialRow
from tuner.telemetry import (
    annotate_trial,
    describe_unavailable,
    fetch_window,
    flag_cpu_contention,
    start_telemetry,
    write_tensorboard,
)


@dataclass(frozen=True)
class Telemetry:
    """The NVML sampler actors by Ray node id, and why telemetry is missing (None when it is complete)."""

    actors: dict[str, Any] = field(default_factory=dict)
    notice: str | None = None

    @property
    def available(self) -> bool:
        return bool(self.actors) and self.notice is None


class Observed(Protocol):
    """What the join reads of the search's context (tuner/context.py:SearchContext): the samplers, and
    where a notice goes."""

    @property
    def telemetry(self) -> Telemetry: ...

    def notice(self, msg: str) -> None: ...


def start(hz: float, on_gpu: bool, say: Callable[[str], None]) -> Telemetry:
    """One sampler per GPU node (per node on CPUs); on a machine without NVML it says so once and the search
    goes on."""
    if not hz:
        return Telemetry(notice="telemetry off (search.telemetry_hz = 0)")
    actors = start_telemetry(hz=hz, all_nodes=not on_gpu)
    lines = [describe_unavailable(info) for info in ray.get([a.info.remote() for a in actors.values()])]
    for line in filter(None, lines):
        say(line)
    return Telemetry(actors=actors, notice=next(filter(None, reversed(lines)), None))


def annotate(ctx: Observed, rows: list[TrialRow], role: Role) -> list[TrialRow]:
    """Each row (of runs of one `role`) joined to its GPU window (util, power, J/token, throttling) and its
    CPU contention flag; the notices say what the search should hear of them."""
    siblings = sorted({r.pid for r in rows if r.pid is not None and r.gate_wait_s is not None})
    out = [_flag_cpu(_join_gpu(ctx, row, siblings)) for row in rows]
    # loss runs share the machine by design and their speed is never used
    flagged = [r for r in out if r.cpu_shared] if role.timed else []
    if flagged:
        worst = max(r.cpu_others_cores or 0.0 for r in flagged)  # a cpu_shared row has it
        ctx.notice(
            f"{flagged[0].phase}: {len(flagged)} of {len(out)} timed runs shared the CPU with other "
            f"processes (up to {worst:.1f} cores busy elsewhere); their speed figures are not trusted"
        )
    if not role.during_screen:
        _say_cache_misses(ctx, out)
    return out


def _say_cache_misses(ctx: Observed, rows: list[TrialRow]) -> None:
    """After the screen the search's cache holds what it compiled: a run that still compiles from scratch
    pays minutes of warm-up the cache was there to save, and the user should hear of it."""
    missed = [r for r in rows if r.compile_cache_use == "miss"]
    if missed:
        warmups = [r.warmup_s for r in missed if r.warmup_s is not None]
        paid = f", {min(warmups):.0f}-{max(warmups):.0f} s of warm-up each" if warmups else ""
        ctx.notice(
            f"{missed[0].phase}: {len(missed)} of {len(rows)} runs compiled from scratch (Inductor's cache "
            f"answered none of their graphs){paid}"
        )


def _join_gpu(ctx: Observed, row: TrialRow, siblings: list[int]) -> TrialRow:
    """The GPU's view of the row's timed window; the phase's other gated runs (`siblings`) shared its GPU
    by design, taking turns at the timing gate, so their processes do not make the figure untrusted."""
    has_window = row.window_t0 and row.window_t1 and row.gpu is not None
    if not (ctx.telemetry.actors and has_window):
        return row
    metrics = row.model_dump()
    gated = siblings if row.gate_wait_s is not None else []
    window = fetch_window(ctx.telemetry.actors, {**metrics, "node": row.node_id, "sibling_pids": gated})
    if not window.get("available"):
        return row.model_copy(update={"telemetry_note": window.get("reason")})
    row = TrialRow.model_validate(annotate_trial(metrics, window))
    return _with_timeline(ctx, row)


def _flag_cpu(row: TrialRow) -> TrialRow:
    return TrialRow.model_validate(flag_cpu_contention(row.model_dump()))


def _with_timeline(ctx: Observed, row: TrialRow) -> TrialRow:
    """The trial's GPU timeline into TensorBoard, next to Ray's curves for that trial, and onto the row."""
    actor = None if row.node_id is None else ctx.telemetry.actors.get(row.node_id)
    if actor is None or not row.path:
        return row
    try:
        ref = actor.timeline.remote(row.gpu, row.window_t0, row.window_t1, 200)
        timeline = ray.get(ref, timeout=30)
        with SummaryWriter(logdir=row.path) as writer:
            write_tensorboard(writer, timeline)
    except Exception as err:  # noqa: BLE001 - a missing plot must not end the search
        ctx.notice(f"telemetry timeline for {row.id} not written: {err}")
        return row
    return row.model_copy(update={"timeline": timeline})
