"""The Ray side of telemetry: one `TelemetryActor` per GPU node around a `GpuSampler`, its gauges in Ray's
metrics, and the search's calls to start the actors and fetch a trial's window from them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import ray
from ray.util.metrics import Gauge
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from tuner.telemetry.devices import error_text
from tuner.telemetry.sampler import GpuSampler
from tuner.telemetry.window import POWER_REASONS, THERMAL_REASONS, GpuSample, empty_window


class RayMetricsExporter:
    """Publishes the latest sample per GPU as Ray gauges (Prometheus: ray_tuner_gpu_*)."""

    GAUGES = {
        "util_gpu": ("tuner_gpu_utilization_percent", "GPU utilisation (NVML), %"),
        "util_mem": ("tuner_gpu_memory_utilization_percent", "GPU memory-controller utilisation, %"),
        "mem_used_mb": ("tuner_gpu_memory_used_mb", "GPU memory used, MiB"),
        "power_w": ("tuner_gpu_power_watts", "GPU power draw, W"),
        "temp_c": ("tuner_gpu_temperature_celsius", "GPU temperature, C"),
        "sm_clock_mhz": ("tuner_gpu_sm_clock_mhz", "GPU SM clock, MHz"),
        "throttled": ("tuner_gpu_throttled", "1 while a thermal or power clock-throttle reason is active"),
    }

    def __init__(self):
        self.gauges = {
            key: Gauge(name, description=text, tag_keys=("node", "gpu"))
            for key, (name, text) in self.GAUGES.items()
        }

    def export(self, node_id: str | None, gpu: int, sample: GpuSample) -> None:
        tags = {"node": str(node_id), "gpu": str(gpu)}
        reasons = sample.throttle_reasons
        values = {key: getattr(sample, key, None) for key in self.GAUGES}
        values["throttled"] = None if reasons is None else bool(reasons & (THERMAL_REASONS | POWER_REASONS))
        for key, value in values.items():
            if value is not None:
                self.gauges[key].set(float(value), tags=tags)


@ray.remote(num_cpus=0)
class TelemetryActor:
    """One per node: a GpuSampler running in this actor's background thread."""

    def __init__(
        self,
        hz: float = 5.0,
        history_s: float = 3600.0,
        nvml_module: str | None = None,
        export_metrics: bool = True,
        energy_hz: float = 1.0,
    ):
        node_id = ray.get_runtime_context().get_node_id()
        exporter = None
        export_error: str | None = None
        if export_metrics:
            try:
                exporter = RayMetricsExporter()
            except Exception as err:
                export_error = f"metrics export off ({error_text(err)})"
        self.sampler = GpuSampler(
            nvml_module, hz=hz, history_s=history_s, node_id=node_id, exporter=exporter, energy_hz=energy_hz
        )
        self.sampler.export.error = export_error
        self.sampler.start()

    def info(self) -> dict:
        return self.sampler.info()

    def window(self, gpu: int | str, t0: float, t1: float, caller_pids: Sequence[int] = ()) -> dict:
        return self.sampler.window(gpu, t0, t1, caller_pids)

    def timeline(self, gpu: int | str, t0: float, t1: float, max_points: int = 200) -> dict:
        return self.sampler.timeline(gpu, t0, t1, max_points)

    def usage(self, spans: Mapping[str, Sequence[float]]) -> dict:
        return self.sampler.usage(spans)

    def pause(self) -> None:
        self.sampler.pause()

    def resume(self) -> None:
        self.sampler.start()

    def stop(self) -> dict:
        self.sampler.stop()
        return self.sampler.info()


def telemetry_actor_name(node_id: str) -> str:
    return f"gpu-telemetry-{node_id}"


def telemetry_nodes(nodes: Iterable[Mapping], all_nodes: bool = False) -> list[str]:
    """Ids of the alive nodes (as ray.nodes() lists them) that get a telemetry actor."""
    return [
        node["NodeID"]
        for node in nodes
        if node.get("Alive") and (all_nodes or node.get("Resources", {}).get("GPU", 0) > 0)
    ]


def start_telemetry(
    hz: float = 5.0,
    all_nodes: bool = False,
    history_s: float = 3600.0,
    nvml_module: str | None = None,
    export_metrics: bool = True,
    energy_hz: float = 1.0,
) -> dict[str, Any]:
    """Starts (or finds) one TelemetryActor per alive node with GPUs (every alive node if all_nodes).

    Each is pinned to its node (hard affinity) and takes no CPU. Named per node, so a second call, or
    another process of the same job, gets the running actor back instead of a second sampler.
    """
    actors = {}
    for node_id in telemetry_nodes(ray.nodes(), all_nodes):
        # mypy keeps a decorated class's own type: @ray.remote made it an ActorClass, which has options
        actors[node_id] = TelemetryActor.options(  # type: ignore[attr-defined]
            name=telemetry_actor_name(node_id),
            get_if_exists=True,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        ).remote(
            hz=hz,
            history_s=history_s,
            nvml_module=nvml_module,
            export_metrics=export_metrics,
            energy_hz=energy_hz,
        )
    return actors


def fetch_window(actors: Mapping[str, Any], trial_metrics: Mapping, timeout_s: float = 30.0) -> dict:
    """The window a trial reported (`node`, `gpu`, `window_t0`, `window_t1`, optional `pid` and
    `sibling_pids`); never raises."""
    node, gpu = trial_metrics.get("node"), trial_metrics.get("gpu")
    t0, t1 = trial_metrics.get("window_t0"), trial_metrics.get("window_t1")
    if gpu is None or t0 is None or t1 is None:
        return empty_window("trial reported no gpu/window_t0/window_t1", node=node, gpu=gpu)
    actor = actors.get(node) if node is not None else None
    if actor is None and node is None and len(actors) == 1:
        actor = next(iter(actors.values()))
    if actor is None:
        return empty_window(f"no telemetry actor on node {node}", node=node, gpu=gpu)
    pid = trial_metrics.get("pid")
    # the trial's own process, and the search's other trials on its GPU (`sibling_pids`: runs that share a
    # GPU through the timing gate are not other users of it)
    pids = ([int(pid)] if pid is not None else []) + [int(p) for p in trial_metrics.get("sibling_pids") or []]
    try:
        ref = actor.window.remote(gpu, float(t0), float(t1), pids)
        return ray.get(ref, timeout=timeout_s)
    except Exception as err:
        return empty_window(f"telemetry query failed ({error_text(err)})", node=node, gpu=gpu)


def fetch_usage(
    actors: Mapping[str, Any], spans: Mapping[str, Sequence[float]], timeout_s: float = 60.0
) -> list[dict]:
    """Every node's answer to `TelemetryActor.usage(spans)`, in node order; a node that cannot answer says
    why (`available: False`, `reason`); never raises."""
    answers = []
    for node_id, actor in actors.items():
        try:
            answer = ray.get(actor.usage.remote(dict(spans)), timeout=timeout_s)
        except Exception as err:
            answer = {"available": False, "reason": f"telemetry query failed ({error_text(err)})"}
        answers.append({"gpus": [], **answer, "node_id": node_id})
    return answers
