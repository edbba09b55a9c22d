"""Joining a trial to its GPU window, and wording and plotting telemetry: plain functions on dicts, no Ray,
so the search calls them on the rows it keeps."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuner.state.records import short_node_id


def annotate_trial(
    trial_metrics: Mapping, window: Mapping, max_throttled_share: float = 0.05, min_samples: int = 3
) -> dict:
    """trial_metrics plus the GPU's view of the trial's window.

    joules_per_token = energy over the window / `tokens` the trial processed in it. The numbers are
    `telemetry_trusted` only with at least min_samples samples, no other process on the GPU (energy is
    per GPU, not per process) and clocks throttled for at most max_throttled_share of the samples.
    """
    samples = int(window.get("samples") or 0)
    energy_j = window.get("energy_j")
    # Tokens processed inside the window (the steady phase), not the whole run's.
    tokens = trial_metrics.get("window_tokens") or trial_metrics.get("tokens")
    throttled = window.get("slowdown_share", window.get("throttled_share"))
    shared = bool(window.get("shared"))
    if not window.get("available", False) or samples == 0:
        why = window.get("reason") or "no telemetry samples in the window"
    elif samples < min_samples:
        why = f"only {samples} samples in the window"
    elif shared:
        why = f"GPU shared with pids {list(window.get('other_pids') or [])}"
    elif throttled is not None and throttled > max_throttled_share:
        why = f"clocks slowed (thermal / power brake) in {throttled:.0%} of samples"
    else:
        why = None
    return {
        **trial_metrics,
        "gpu_util_mean": window.get("util_mean"),
        "gpu_power_mean_w": window.get("power_mean_w"),
        "energy_j": energy_j,
        "energy_source": window.get("energy_source"),
        "joules_per_token": energy_j / tokens if energy_j is not None and tokens else None,
        "gpu_temp_max_c": window.get("temp_max_c"),
        "throttled_share": window.get("throttled_share"),
        "slowdown_share": throttled,
        "shared": shared,
        "telemetry_samples": samples,
        "telemetry_trusted": why is None,
        "telemetry_note": why,
    }


def cpu_contention(trial_metrics: Mapping, min_others: float = 0.5, busy_share: float = 0.85) -> str | None:
    """Why the host's CPUs were contended during the trial's timed window, or None.

    Contended: other processes kept more than `min_others` cores busy and, with the trial's own, the host
    was at least `busy_share` busy, so they took time the run could have used. (Ray's own daemons stay
    under half a core; a big node's unrelated load with idle cores to spare does not count.) 0.85, not 0.9:
    under two busy loops a 2-core host read 1.79 cores busy in a window where the starved run got 0.03.
    """
    own, others, count = (trial_metrics.get(k) for k in ("cpu_own_cores", "cpu_others_cores", "cpu_count"))
    if others is None or own is None or not count:
        return None
    if others > min_others and own + others >= busy_share * count:
        return f"CPU shared: other processes kept {others:.1f} of {count} cores busy (this run {own:.1f})"
    return None


def flag_cpu_contention(row: dict) -> dict:
    """The trial row, marked `cpu_shared` and not trusted (with the reason in its note) if its CPUs were
    contended; a GPU telemetry note that already made it untrusted is kept."""
    contended = cpu_contention(row)
    if contended:
        note = row.get("telemetry_note") if row.get("telemetry_trusted") is False else None
        row.update(cpu_shared=True, telemetry_trusted=False)
        row["telemetry_note"] = "; ".join(n for n in (note, contended) if n)
    return row


def describe_unavailable(info: Mapping) -> str | None:
    """One line for the search log when a node's telemetry is missing or partial; None when complete."""
    node = short_node_id(info.get("node_id")) or "this node"
    if not info.get("available"):
        return (
            f"GPU telemetry unavailable on node {node}: {info.get('reason') or 'unknown reason'}; "
            "carrying on without power, energy and throttle data."
        )
    missing: dict[str, list[str]] = {}
    for gpu, fields in (info.get("unsupported") or {}).items():
        for name, reason in fields.items():
            missing.setdefault(f"{name} ({reason})", []).append(str(gpu))
    if not missing:
        return None
    parts = [f"{what} on GPU {','.join(gpus)}" for what, gpus in missing.items()]
    return f"GPU telemetry on node {node} lacks " + "; ".join(parts) + "; carrying on without it."


def write_tensorboard(
    writer: Any, timeline: Mapping, step_key: str = "ms", tag_prefix: str = "telemetry"
) -> int:
    """Writes a timeline's points as scalars `{tag_prefix}/gpu{N}/{field}`; returns how many were written.

    step_key: "ms" (milliseconds since the first point), "index" (point number) or a numeric key of the
    points. Each scalar carries the point's wall time, so TensorBoard's relative/wall axes line up too.
    """
    points = list(timeline.get("points") or [])
    if not points:
        return 0
    gpu = timeline.get("gpu", 0)
    first_t = points[0]["t"]
    written = 0
    for index, point in enumerate(points):
        if step_key == "ms":
            step = int(round((point["t"] - first_t) * 1000))
        elif step_key == "index":
            step = index
        else:
            step = int(point[step_key])
        for name, value in point.items():
            if name == "t" or name == step_key or value is None:
                continue
            tag = f"{tag_prefix}/gpu{gpu}/{name}"
            writer.add_scalar(tag, float(value), global_step=step, walltime=point["t"])
            written += 1
    return written
