"""What the Ray dashboard and Prometheus show of a search that ran as a Ray Job (tests/test_ray_jobs.py
starts the head, Prometheus and the job once for both files).

The dashboard's REST API lists the job and the search's actors under readable names: the telemetry actor
as `gpu-telemetry-<node id>` (class TelemetryActor), the trials by their phase (`screen_trial`, `loss_check_0_trial`, `remeasure_trial`). The search's gauges
(`tuner_gpu_*`, Prometheus names `ray_tuner_gpu_*`) reach Ray's metrics endpoint, and a real Prometheus
that scrapes what Ray's service-discovery file lists reads them back. There is no GPU here: the job runs
with tests/fake_nvml.py standing in for pynvml, so the search's own telemetry actor samples two fake GPUs.
Without Prometheus installed (`apt-get install -y prometheus`) that test skips, unless
TUNER_REQUIRE_PROMETHEUS=1 (CI) makes it fail.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

import pytest

# as `test_ray_jobs` (the module pytest imported), not `tests.test_ray_jobs`: one shared run, not two
from test_ray_jobs import Run, release, shared_run

from tests.fake_nvml import DEFAULT as FAKE_GPUS

pytestmark = pytest.mark.slow
GAUGES = (
    "ray_tuner_gpu_power_watts",
    "ray_tuner_gpu_utilization_percent",
    "ray_tuner_gpu_temperature_celsius",
)


@pytest.fixture(scope="module")
def run(request) -> Iterator[Run]:
    yield shared_run(request)
    release(request)


def _job(run: Run) -> dict:
    (job,) = [j for j in run.head.get("/api/jobs/") if j["submission_id"] == run.job_id]
    return job


def _actors(run: Run, job_id: str) -> list[dict]:
    """The job's actors, alive or dead, from the dashboard's state API."""
    body = run.head.get(
        f"/api/v0/actors?detail=true&limit=1000&filter_keys=job_id&filter_predicates=%3D&filter_values={job_id}"
    )
    return body["data"]["result"]["result"]


def test_the_dashboard_lists_the_job_and_the_searchs_actors_under_readable_names(run):
    job = _job(run)
    assert job["status"] == "SUCCEEDED" or "exit code 4" in (job.get("message") or ""), job  # 4: a busy host
    assert job["entrypoint"].startswith("python -m tuner.search --out")
    actors = _actors(run, job["job_id"])
    assert actors and {a["job_id"] for a in actors} == {job["job_id"]}
    (telemetry,) = [a for a in actors if a["class_name"] == "TelemetryActor"]
    nodes = {n["node_id"] for n in run.head.get("/api/v0/nodes")["data"]["result"]["result"]}
    assert telemetry["name"] == f"gpu-telemetry-{telemetry['node_id']}" and telemetry["node_id"] in nodes
    trials = [a for a in actors if a["class_name"].endswith("ImplicitFunc")]  # Ray Tune's function trainable
    names = {a["repr_name"] for a in trials}  # each phase's trials under its name
    assert {"screen_trial", "remeasure_trial"} <= names, names
    assert all(re.fullmatch(r"(screen|loss_check_\d+|remeasure)_trial", n) for n in names), names
    print(f"actors: {sorted({a['name'] or a['repr_name'] or a['class_name'] for a in actors})}")


def test_our_gauges_reach_prometheus_through_rays_service_discovery(run):
    if run.prometheus is None:
        if os.environ.get("TUNER_REQUIRE_PROMETHEUS") == "1":
            pytest.fail(
                "TUNER_REQUIRE_PROMETHEUS=1 but `prometheus` is not on PATH (apt-get install -y prometheus)"
            )
        pytest.skip("Prometheus is not installed (apt-get install -y prometheus)")
    targets = run.prometheus.api("targets")["activeTargets"]
    assert targets and all(t["labels"]["job"] == "ray" for t in targets)
    assert any(t["health"] == "up" for t in targets), targets
    (telemetry,) = [a for a in _actors(run, _job(run)["job_id"]) if a["class_name"] == "TelemetryActor"]
    for gauge in GAUGES:
        # the actor is gone with the job: its last samples are in Prometheus' store, not on the endpoint
        series = run.prometheus.api("query", query=f"max_over_time({gauge}[30m])")["result"]
        assert series, f"{gauge} was never scraped"
        assert {s["metric"]["node"] for s in series} == {telemetry["node_id"]}
        assert {s["metric"]["gpu"] for s in series} == {"0", "1"}
    power = run.prometheus.api("query", query=f"max_over_time({GAUGES[0]}[30m])")["result"]
    assert {s["metric"]["gpu"]: float(s["value"][1]) for s in power} == {
        str(g): FAKE_GPUS.power_w(g) for g in (0, 1)
    }
