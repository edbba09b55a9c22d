"""Shared test set-up: Ray runs locally without token auth and sends no usage stats (set before any import);
the caches a search keeps between searches (compile caches, remembered answers) live in a folder of this
session's, never the user's, and every search starts fresh unless a test asks for a remembered answer."""

import os
import tempfile
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("TUNER_CACHE_DIR", tempfile.mkdtemp(prefix="tuner-test-cache-"))
os.environ.setdefault("TUNER_FRESH", "1")


@pytest.fixture
def one_cpu_ray(monkeypatch):
    """A local Ray of one CPU in this process, for real Tune experiments on the toy workloads."""
    import ray  # here, not at the top: the environment above is set before Ray is first imported

    monkeypatch.chdir(TESTS)  # workers get the driver's cwd on sys.path: the test workloads import
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def module_cpu_ray():
    """one_cpu_ray's Ray, started once for a whole module: Ray's start (~6 s on 2 cores) and a worker's first
    imports are most of a small Tune test. For modules whose Ray tests all want this one-CPU Ray and start no
    Ray of their own; each test's named actors (telemetry, gates) are got-if-they-exist, so one test's do not
    stop the next."""
    import ray

    before = os.getcwd()
    os.chdir(TESTS)  # workers get the driver's cwd on sys.path: the test workloads import
    try:
        ray.init(
            address="local", num_cpus=1, include_dashboard=False, log_to_driver=False, logging_level="ERROR"
        )
    finally:
        os.chdir(before)
    yield
    ray.shutdown()


@pytest.fixture
def shared_cpu_ray(module_cpu_ray, monkeypatch):
    """The module's one-CPU Ray, with this test's cwd where one_cpu_ray puts it."""
    monkeypatch.chdir(TESTS)
