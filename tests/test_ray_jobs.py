"""The search as a Ray Job on a running Ray head, the way docs/running.md shows it:

    ray job submit --address http://127.0.0.1:8265 --working-dir . -- python -m tuner.search --config ...

The head is a real `ray start --head` on 127.0.0.1 with its own temp dir and free ports, and with Ray's
token auth on (as a shared cluster should run): the job is submitted with the token, and a request without
it is refused. The search is a tiny one (two screen trials over speed-only knobs, a short planned run), so
it succeeds in about a minute; its logs must show the search's progress lines. tests/test_ray_jobs_dashboard.py
reads the same job back through the dashboard and Prometheus: `shared_run` starts the head, Prometheus and
the job once for both files when they run one after the other, and `release` stops them after the last.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.ray_procs import free_ports, stop_group
from tests.user_env import user_env

ROOT = Path(__file__).resolve().parents[1]
SHAKESPEARE = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"
RAY = str(Path(sys.executable).with_name("ray"))
TINY_SEARCH = [
    "--config", "configs/smoke.yaml", "--trials", "2",
    "--set", "search.space={loader: [dataloader, device], fused_adamw: [false, true]}",
    "--set", "search.screen_steps=4", "--set", "search.repeats=1", "--set", "search.remeasure_top=1",
    "--set", "search.probe_batch=false", "--set", "train.tokens=8192", "--set", "train.eval_tokens=2048",
]  # fmt: skip
# Stands in for pynvml inside the job, so the search's telemetry actor exports its gauges on a machine
# without a GPU (tests/fake_nvml.py: two fake GPUs). Only the job's processes see it (PYTHONPATH).
FAKE_PYNVML = '''
    """pynvml for the test's Ray job: the fake NVML of tests/fake_nvml.py."""
    import sys

    import tests.fake_nvml

    sys.modules[__name__] = tests.fake_nvml
'''

# The ports `ray start --head` opens besides the dashboard's, each set to a free one so that this head does
# not collide with another Ray instance on the machine (free ports are ephemeral ones, above the workers'
# default range 10002-19999).
HEAD_PORTS = (
    "port", "ray-client-server-port", "metrics-export-port", "dashboard-agent-listen-port",
    "dashboard-agent-grpc-port", "runtime-env-agent-port", "node-manager-port", "object-manager-port",
)  # fmt: skip

pytestmark = pytest.mark.slow


def free_port() -> int:
    return free_ports(1)[0]


@dataclass
class Head:
    """A Ray head of this test's own (`ray start --head --block` in a process group of its own)."""

    temp: Path
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    dashboard_port: int = 0  # chosen by start(), with the head's other ports
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    @property
    def env(self) -> dict[str, str]:
        """What a client of this head needs: Ray's token auth on, with its token."""
        return {
            **user_env(),
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": self.token,
            "RAY_USAGE_STATS_ENABLED": "0",
        }

    def start(self) -> None:
        self.dashboard_port, *others = free_ports(len(HEAD_PORTS) + 1)
        ports = dict(zip(HEAD_PORTS, others)) | {"dashboard-port": self.dashboard_port}
        cmd = [RAY, "start", "--head", "--block", "--node-ip-address=127.0.0.1", "--dashboard-host=127.0.0.1"]
        cmd += [f"--{k}={v}" for k, v in ports.items()]
        cmd += ["--num-cpus=2", f"--temp-dir={self.temp}", "--disable-usage-stats"]
        path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"  # the job's `python` is ours
        log = (self.temp / "head.log").open("w")
        self.proc = subprocess.Popen(
            cmd, env={**self.env, "PATH": path}, stdout=log, stderr=log, start_new_session=True
        )
        self.wait_ready()

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            assert self.proc.poll() is None, (self.temp / "head.log").read_text()[-3000:]
            try:
                if self.get("/api/version").get("ray_version"):
                    return
            except OSError:
                pass
            time.sleep(1)
        raise AssertionError(f"the Ray head did not answer in {timeout:.0f} s")

    def get(self, path: str, token: bool = True) -> dict | list:
        headers = {"Authorization": f"Bearer {self.token}"} if token else {}
        request = urllib.request.Request(self.url + path, headers=headers)
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc)


PROMETHEUS_CONFIG = """
global: {scrape_interval: 2s, evaluation_interval: 10s}
scrape_configs:
  - job_name: ray
    file_sd_configs:
      - files: ['%s']
        refresh_interval: 5s
"""


@dataclass
class Prometheus:
    """A real Prometheus (Debian's `prometheus`) scraping what Ray's service-discovery file lists."""

    temp: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None

    def start(self, discovery: Path) -> None:
        config = self.temp / "prometheus.yml"
        config.write_text(PROMETHEUS_CONFIG % discovery)
        cmd = [
            shutil.which("prometheus"),
            f"--config.file={config}",
            f"--storage.tsdb.path={self.temp / 'tsdb'}",
        ]
        cmd += [f"--web.listen-address=127.0.0.1:{self.port}"]
        log = (self.temp / "prometheus.log").open("w")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=log, start_new_session=True)
        deadline = time.time() + 60
        while time.time() < deadline and self.proc.poll() is None:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=5).close()
                return
            except OSError:
                time.sleep(0.5)
        raise AssertionError(
            "Prometheus did not start: " + (self.temp / "prometheus.log").read_text()[-2000:]
        )

    def api(self, path: str, **params: str) -> dict:
        query = urllib.parse.urlencode(params)
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}" + (f"?{query}" if query else "")
        with urllib.request.urlopen(url, timeout=30) as response:
            body = json.loads(response.read())
        assert body["status"] == "success", body
        return body["data"]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@dataclass
class Run:
    """The shared run: the head, Prometheus scraping it (None when it is not installed), and the job."""

    head: Head
    out: Path
    prometheus: Prometheus | None = None
    job_id: str = ""
    submit: subprocess.CompletedProcess | None = None
    wall_s: float = 0.0


_RUN: Run | None = None
SHARING_FILES = {
    "test_ray_jobs.py",
    "test_ray_jobs_dashboard.py",
}  # the modules whose `run` fixture is shared_run


def shared_run(request: pytest.FixtureRequest) -> Run:
    """The head, Prometheus and the tiny search's job, started once per session for this file and
    tests/test_ray_jobs_dashboard.py, and stopped when the session ends."""
    global _RUN
    if _RUN is None:
        temp = Path(
            tempfile.mkdtemp(prefix="ray-", dir="/tmp")
        )  # short: Ray's socket paths must fit 107 bytes
        _RUN = Run(head=Head(temp), out=temp / "out")
        request.session.addfinalizer(_stop_run)
        _RUN.head.start()
        if shutil.which("prometheus"):
            _RUN.prometheus = Prometheus(temp / "prometheus")
            _RUN.prometheus.temp.mkdir()
            _RUN.prometheus.start(temp / "prom_metrics_service_discovery.json")
        submit_search(_RUN)
    return _RUN


def _stop_run() -> None:
    global _RUN
    run, _RUN = _RUN, None
    if run is None:
        return
    try:
        if run.prometheus is not None:
            run.prometheus.stop()
    finally:
        run.head.stop()
        shutil.rmtree(run.head.temp, ignore_errors=True)


def submit_search(run: Run) -> None:
    """`ray job submit` of the tiny search, with the repository as the working dir; waits for the end."""
    shim = run.head.temp / "fake-pynvml"
    shim.mkdir()
    (shim / "pynvml.py").write_text(textwrap.dedent(FAKE_PYNVML))
    env_vars = {"TUNER_OFFLINE": "1", "PYTHONPATH": str(shim)}
    runtime_env = {"excludes": ["/.git/", "/out/", "/.gpu*/", "/docs/"], "env_vars": env_vars}
    data = ["--data", str(SHAKESPEARE)] if SHAKESPEARE.exists() else []
    run.job_id = f"tiny-search-{secrets.token_hex(4)}"
    cmd = [
        RAY,
        "job",
        "submit",
        "--address",
        run.head.url,
        "--working-dir",
        ".",
        "--submission-id",
        run.job_id,
    ]
    cmd += ["--runtime-env-json", json.dumps(runtime_env), "--"]
    cmd += ["python", "-m", "tuner.search", "--out", str(run.out), *data, *TINY_SEARCH]
    started = time.time()
    run.submit = subprocess.run(cmd, cwd=ROOT, env=run.head.env, capture_output=True, text=True, timeout=600)
    run.wall_s = time.time() - started


def release(request: pytest.FixtureRequest) -> None:
    """At a sharing module's end: stops the shared run unless the session's next test shares it too (run
    alone or together, the two files share one job; in the whole suite, no head idles between them)."""
    items = request.session.items
    last = max(i for i, item in enumerate(items) if item.path == request.path)
    if last + 1 >= len(items) or items[last + 1].path.name not in SHARING_FILES:
        _stop_run()


@pytest.fixture(scope="module")
def run(request) -> Iterator[Run]:
    yield shared_run(request)
    release(request)


def test_the_search_runs_as_a_ray_job_and_its_logs_show_its_progress(run):
    out = run.submit.stdout + run.submit.stderr
    print(f"ray job submit wall time: {run.wall_s:.0f} s")
    job = run.head.get(f"/api/jobs/{run.job_id}")
    logs = run.head.get(f"/api/jobs/{run.job_id}/logs")["logs"]
    if "the speed figures are not trusted" in logs:  # exit 4: other work kept this machine's cores busy
        assert job["status"] == "FAILED" and "exit code 4" in (job.get("message") or ""), job
    else:
        assert run.submit.returncode == 0, out[-4000:]
        assert f"Job '{run.job_id}' succeeded" in out, out[-4000:]
        assert job["status"] == "SUCCEEDED", job
    assert job["type"] == "SUBMISSION", job
    for line in ("[hardware] starting", "[screen] 2/2 done", "[remeasure] starting", "reports: "):
        assert line in logs, f"{line!r} not in the job's logs:\n{logs[-3000:]}"
    assert "GPU telemetry unavailable" not in logs  # the job's python found its packages and the fake NVML
    summary = json.loads((run.out / "summary.json").read_text())
    assert len([t for t in summary["trials"] if t["phase"] == "screen"]) == 2
    assert (run.out / "best.yaml").exists()


def test_the_head_refuses_a_request_without_its_token(run):
    with pytest.raises(urllib.error.HTTPError) as refused:
        run.head.get("/api/jobs/", token=False)
    assert refused.value.code in (401, 403)
    assert any(j["submission_id"] == run.job_id for j in run.head.get("/api/jobs/"))
