"""GPU telemetry: one NVML sampler per GPU node, joined to the time windows trials report.

`window` holds the maths over samples, `devices` what is read from NVML, `sampler` the sampling thread
(plain Python, tested with a fake NVML), `actor` the thin Ray actor that `start_telemetry` pins to each
node, and `join` the functions that turn a trial's reported window (`window_t0`/`window_t1` in
time.time(), `gpu`, `node`, `tokens`, `pid`) into energy, J/token and a `telemetry_trusted` flag. Nothing
here raises into the search: a node without NVML answers `available: False` with a reason, and
`describe_unavailable` words it once. `fetch_usage` asks every node how busy each of its GPUs was over
the phases of the search.
"""

from tuner.telemetry.actor import (
    RayMetricsExporter,
    TelemetryActor,
    fetch_usage,
    fetch_window,
    start_telemetry,
    telemetry_actor_name,
    telemetry_nodes,
)
from tuner.telemetry.devices import FIELDS, MB, GpuReader
from tuner.telemetry.join import (
    annotate_trial,
    cpu_contention,
    describe_unavailable,
    flag_cpu_contention,
    write_tensorboard,
)
from tuner.telemetry.sampler import GpuSampler
from tuner.telemetry.window import (
    HW_POWER_BRAKE_SLOWDOWN,
    HW_SLOWDOWN,
    HW_THERMAL_SLOWDOWN,
    POWER_REASONS,
    SW_POWER_CAP,
    SW_THERMAL_SLOWDOWN,
    THERMAL_REASONS,
    GpuSample,
    downsample,
    empty_window,
    summarize_usage,
    summarize_window,
)

__all__ = [
    "FIELDS",
    "HW_POWER_BRAKE_SLOWDOWN",
    "HW_SLOWDOWN",
    "HW_THERMAL_SLOWDOWN",
    "MB",
    "POWER_REASONS",
    "SW_POWER_CAP",
    "SW_THERMAL_SLOWDOWN",
    "THERMAL_REASONS",
    "GpuReader",
    "GpuSample",
    "GpuSampler",
    "RayMetricsExporter",
    "TelemetryActor",
    "annotate_trial",
    "cpu_contention",
    "describe_unavailable",
    "downsample",
    "empty_window",
    "fetch_usage",
    "fetch_window",
    "flag_cpu_contention",
    "start_telemetry",
    "summarize_usage",
    "summarize_window",
    "telemetry_actor_name",
    "telemetry_nodes",
    "write_tensorboard",
]
