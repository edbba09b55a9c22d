"""Shared test set-up: Ray runs locally without token auth and sends no usage stats (set before any import);
the caches a search keeps between searches (compile caches, remembered answers) live in a folder of this
session's, never the user's, and every search starts fresh unless a test asks for a remembered answer."""

import functools
import os
import sys
import tempfile
from pathlib import Path

import pytest

import tests.user_env  # noqa: F401  before torch: what the user exported, not what torch writes later

TESTS = Path(__file__).resolve().parent

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("TUNER_CACHE_DIR", tempfile.mkdtemp(prefix="tuner-test-cache-"))
os.environ.setdefault("TUNER_FRESH", "1")
# Inductor on the CPU proves each SIMD ISA the CPU lists by compiling and loading a probe into its cache dir
# before its first kernel: ~10 s of a tiny model's 19 s cold compile on 2 cores, paid again in every fresh
# cache dir the tests make (issue 44). The tests trust the CPU's list instead (Ray's workers and the CLIs
# inherit it); the product keeps the probe.
os.environ.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "1")
# The project's own modules are compiled to bytecode once and read back after, here and in every search, CLI
# and Ray worker the tests start (they inherit this environment): with PYTHONDONTWRITEBYTECODE set, as on
# this project's CI machines, each of those hundreds of processes compiled tuner/, trainables/ and model/
# from source again (importing them: ~13 s against ~8.5 s from bytecode, at load 5; docs/test-times.md).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

# Under pytest-xdist each worker gets its share of the cores for torch's intra-op threads (1 each with -n 2 on
# 2 cores), in this process and the CLIs it starts, unless OMP_NUM_THREADS was set: two workers of two
# threads each on two busy cores made OpenMP's spinning barriers the cost, not the work (a 60-step tiny-model
# test: 1.3 s alone, 174 s at load 9 with 2 threads, 1.5 s with 1; issue 44 item 2, docs/test-times.md).
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _SHARE = max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    os.environ.setdefault("OMP_NUM_THREADS", str(_SHARE))


@pytest.fixture
def one_cpu_ray(monkeypatch):
    """A local Ray of one CPU in this process, for real Tune experiments on the toy workloads."""
    import ray  # here, not at the top: the environment above is set before Ray is first imported

    monkeypatch.chdir(TESTS)  # workers get the driver's cwd on sys.path: the test workloads import
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield
    ray.shutdown()


# One Ray of each shape below for every test that asks for it (shared_cpu_ray, module_cpu_ray: one CPU;
# two_fake_gpus: 4 CPUs and 2 GPUs it does not have), kept up from one such test to the next, across modules
# too: Ray's start (~6 s on 2 cores) and a worker's first imports are most of a small Tune test. It is shut
# down before the first test of any module that uses no Ray of that shape (that module may start a Ray of its
# own, or want the other shape), so a module that uses one must start no Ray of its own and use one shape.
# Each test's named actors (telemetry, gates) are got-if-they-exist, so one test's do not stop the next.
SHARED_RAYS = {"one CPU": {"num_cpus": 1}, "two fake GPUs": {"num_cpus": 4, "num_gpus": 2}}
_FIXTURE_SHAPES = {"shared_cpu_ray": "one CPU", "module_cpu_ray": "one CPU", "two_fake_gpus": "two fake GPUs"}
SHARED_RAY_MODULES: dict[str, str] = {}  # module -> the shape of its shared Ray
_shared_ray_up: list[str] = []  # the shape up now, if any


@pytest.hookimpl(trylast=True)  # after `-m`/`-k` deselected: only the tests that will run count
def pytest_collection_modifyitems(items):
    for item in items:
        for fixture in set(_FIXTURE_SHAPES) & set(item.fixturenames):
            SHARED_RAY_MODULES[item.nodeid.split("::")[0]] = _FIXTURE_SHAPES[fixture]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if SHARED_RAY_MODULES.get(item.nodeid.split("::")[0]) not in _shared_ray_up:
        stop_shared_ray()


def pytest_sessionfinish():
    stop_shared_ray()


def stop_shared_ray() -> None:
    if _shared_ray_up:
        import ray

        ray.shutdown()
        _shared_ray_up.clear()


def start_shared_ray(shape: str = "one CPU") -> None:
    import ray

    if _shared_ray_up == [shape] and ray.is_initialized():
        return
    stop_shared_ray()
    before = os.getcwd()
    os.chdir(TESTS)  # workers get the driver's cwd on sys.path: the test workloads import
    try:
        ray.init(
            address="local",
            include_dashboard=False,
            log_to_driver=False,
            logging_level="ERROR",
            **SHARED_RAYS[shape],
        )
    finally:
        os.chdir(before)
    _shared_ray_up[:] = [shape]


SHARED_RAY_GROUP = "the modules on the shared one-CPU Ray"
SHARED_GPU_GROUP = "the modules on the shared two-fake-GPU Ray"
SHARED_JOB_GROUP = "the modules on the shared Ray Job"


def xdist_unit(nodeid: str) -> str:
    """What pytest-xdist hands a worker as one piece (-n 2): a whole module, so its module-scoped Ray starts
    once, not on each worker; and every module that uses the shared one-CPU Ray together, so that Ray starts
    once for all of them, not again after each module between them (8 starts -> 1; issue 44); and the slow
    suite's two Ray Job modules together, so their head and job start once (-m slow -n 2); the same for the
    shared two-fake-GPU Ray. Which modules use which is read from their source here: the controller sees
    test ids, not fixtures. A module of slow tests only that shares nothing between its tests (each starts
    its own search and Ray) is split test by test: test_search.py's four searches, one unit, were one
    worker's last 1,341 s of CI's slow suite (2026-12-07)."""
    module = nodeid.split("::", 1)[0]
    unit = _module_unit(module)
    return nodeid if unit == module and _shares_nothing(module) else unit


@functools.cache
def _shares_nothing(module: str) -> bool:
    """Whether every test of `module` is slow and none shares a module-scoped fixture with another."""
    try:
        source = (TESTS.parent / module).read_text()
    except OSError:
        return False
    return "\npytestmark = pytest.mark.slow\n" in source and 'scope="module"' not in source


@functools.cache  # asked again as each test ends
def _module_unit(module: str) -> str:
    try:
        source = (TESTS.parent / module).read_text()
    except OSError:
        return module
    if "shared_run" in source:  # test_ray_jobs*.py: one head and one Ray Job for both modules
        return SHARED_JOB_GROUP
    if "two_fake_gpus" in source:
        return SHARED_GPU_GROUP
    return SHARED_RAY_GROUP if "shared_cpu_ray" in source or "module_cpu_ray" in source else module


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: a run without xdist installed still starts
def pytest_xdist_make_scheduler(config, log):
    """`-n 2`'s default split (test by test) started a module's Ray on both workers and restarted the shared
    one as a worker moved between modules: by units instead (xdist_unit; `--dist loadfile`'s split with the
    shared Ray's modules as one unit), those of more tests first. An explicit `--dist` other than load is kept."""
    if config.getoption("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_unit(nodeid)

    return ByUnit(config, log)


@pytest.fixture(scope="module")
def module_cpu_ray():
    """The shared one-CPU Ray (above), up for the whole module."""
    start_shared_ray()


@pytest.fixture
def shared_cpu_ray(monkeypatch):
    """one_cpu_ray's Ray, started by the first test that asks and kept for the next (above), with this test's
    cwd where one_cpu_ray puts it."""
    start_shared_ray()
    monkeypatch.chdir(TESTS)


@pytest.fixture(scope="module")
def two_fake_gpus():
    """A local Ray that advertises two GPUs it does not have, shared as above, with the gate of each GPU open
    (the search's driver owns one per GPU; a run beside parks at its GPU's); the runs train on the CPU
    through the search's own trainable. Each test's runs have ended when it returns, each has its own OUT."""
    from trainables.training.gate import open_gates

    start_shared_ray("two fake GPUs")
    return open_gates()
