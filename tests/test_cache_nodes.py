"""The search's compile caches follow its trials to other nodes (issue #24, part 3).

A trial on a node other than the driver's fetches its key's part of the driver's cache root (Inductor, Triton)
into its node's own copy before it trains, and sends back what it compiled (trainables/training/compile_cache.py, tuner/session/cache_server.py). The
two-node test proves it with real Inductor on CPU: the driver's node runs no trial, node 1 compiles cold,
and node 2, whose cache dir is elsewhere on disk and starts empty, finds node 1's graphs, through the driver.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import ray
from toy_workload import TOY

from model import library_env
from trainables.spec import TrialSpec
from trainables.training import compile_cache
from trainables.training.compile_cache import NODE_CACHE_VAR, CacheKey, NodeCache, manifest, node_cache_root
from tuner.runs.request import Placement, TrialInputs
from tuner.runs.tune import run_cases
from tuner.session import cache_server

TESTS = Path(__file__).resolve().parent


KEY = CacheKey("NVIDIA H100 80GB HBM3 sm_90", {"torch": "2.11.0+cu130", "triton": "3.6.0"})
OTHER = CacheKey("NVIDIA H200 sm_90", {"torch": "2.11.0+cu130", "triton": "3.6.0"})


class DirDriver:
    """The driver's cache root as a plain dir, served as tuner/session/cache_server.py serves it, without Ray: a dir
    is named by its path in the root ("<key>/inductor")."""

    def __init__(self, root: Path, fail: str | None = None):
        self.root, self.fail = root, fail
        self.reads = 0

    def manifest(self):
        if self.fail == "manifest":
            raise ConnectionError("driver gone")
        keys = [p.name for p in self.root.iterdir() if p.is_dir()] if self.root.is_dir() else []
        return {f"{k}/{r}": manifest(self.root / k / r) for k in keys for r in compile_cache.ROOTS}

    def read(self, root, paths):
        self.reads += 1
        return compile_cache.read_files(self.root / root, paths)

    def missing(self, root, paths):
        return [p for p in paths if not (self.root / root / p).exists()]

    def write(self, root, files):
        if self.fail == "write":
            raise TimeoutError("too slow")
        return compile_cache.write_files(self.root / root, files)


def put(path: Path, data: bytes = b"x") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def test_a_node_fetches_what_it_lacks_and_sends_back_what_it_compiled(tmp_path):
    driver = tmp_path / "driver"
    put(driver / KEY.name / "inductor" / "fxgraph" / "ab" / "key" / "entry", b"graph")
    put(driver / KEY.name / "triton" / "HASH" / "k.autotune.json", b"{}")
    put(driver / KEY.name / "inductor" / "locks" / "x.lock")  # locks and temp files stay where they are
    node = NodeCache(DirDriver(driver), tmp_path / "node", KEY)
    assert "fetched 2 files" in node.pull()
    mine = tmp_path / "node" / KEY.name
    assert (mine / "inductor" / "fxgraph" / "ab" / "key" / "entry").read_bytes() == b"graph"
    assert not (mine / "inductor" / "locks").exists()

    put(mine / "inductor" / "fxgraph" / "cd" / "new" / "entry", b"compiled here")
    assert "sent 1 new files" in node.push()
    assert (
        driver / KEY.name / "inductor" / "fxgraph" / "cd" / "new" / "entry"
    ).read_bytes() == b"compiled here"
    again = NodeCache(DirDriver(driver), tmp_path / "node", KEY)
    assert "fetched 0 files" in again.pull()  # the node has it all already


def test_a_node_moves_only_its_own_keys_entries_and_says_what_the_key_stands_for(tmp_path):
    driver = tmp_path / "driver"
    put(driver / KEY.name / "inductor" / "mine", b"for this GPU")
    put(driver / OTHER.name / "inductor" / "theirs", b"for another GPU")
    node = NodeCache(DirDriver(driver), tmp_path / "node", OTHER)
    assert "fetched 1 files" in node.pull()
    assert [p.name for p in (tmp_path / "node").iterdir()] == [OTHER.name]

    put(tmp_path / "node" / OTHER.name / "triton" / "H" / "k.autotune.json", b"{}")
    assert "sent 1 new files" in node.push()
    assert (driver / OTHER.name / "triton" / "H" / "k.autotune.json").exists()
    assert json.loads((driver / OTHER.name / compile_cache.KEY_FILE).read_text()) == OTHER.as_json()
    assert not (driver / KEY.name / compile_cache.KEY_FILE).exists()  # only the key it compiled for


def test_a_sync_is_bounded_and_a_failed_one_is_a_notice_not_an_error(tmp_path, monkeypatch):
    driver = tmp_path / "driver"
    for i in range(4):
        put(driver / KEY.name / "inductor" / f"e{i}", b"y" * (300 << 10))
    monkeypatch.setenv(compile_cache.LIMIT_VAR, "1")  # 1 MB: three of the four 300 KB files
    said = NodeCache(DirDriver(driver), tmp_path / "node", KEY).pull()
    assert "fetched 3 files" in said and "1 files over the 1.0 MB limit" in said
    assert len(manifest(tmp_path / "node" / KEY.name / "inductor")) == 3

    said = NodeCache(DirDriver(driver, fail="manifest"), tmp_path / "other", KEY).pull()
    assert said.startswith("compile cache: not fetched") and "driver gone" in said
    put(tmp_path / "other" / KEY.name / "triton" / "k", b"z")
    said = NodeCache(DirDriver(driver, fail="write"), tmp_path / "other", KEY).push()
    assert said.startswith("compile cache: not sent back") and "\n" not in said
    assert compile_cache.batches({"a": 5, "b": 5}, limit=100)[0] == [["a", "b"]]
    assert not compile_cache.safe("../etc/passwd") and not compile_cache.safe("/abs")
    compile_cache.write_files(tmp_path / "w", {"../escape": b"no"})
    assert not (tmp_path / "escape").exists()


def test_each_driver_cache_has_one_copy_per_node_under_the_nodes_own_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(NODE_CACHE_VAR, str(tmp_path))
    a, b = node_cache_root("/out/a/compile-cache"), node_cache_root("/out/b/compile-cache")
    assert a.parent == b.parent == tmp_path and a != b
    assert node_cache_root("/out/a/compile-cache") == a


@pytest.fixture
def two_node_cluster(tmp_path, monkeypatch):
    """A head (the driver's node, no CPUs: no trial runs there) and two nodes of one CPU each, pinned by the
    custom resources node1 and node2, each keeping its copy of the caches in a dir of its own."""
    from ray.cluster_utils import Cluster

    monkeypatch.chdir(TESTS)  # workers get the driver's cwd on sys.path: toy_workload imports
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        for name in ("node1", "node2"):
            cluster.add_node(
                num_cpus=1, resources={name: 1}, env_vars={NODE_CACHE_VAR: str(tmp_path / f"{name}-cache")}
            )
        cluster.wait_for_nodes()
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_graph_compiled_on_one_node_is_a_cache_hit_on_another(tmp_path, two_node_cluster):
    driver_cache = tmp_path / "user-cache" / "compile"
    env = {
        library_env.COMPILE_CACHE_VAR: str(driver_cache),  # the search's root: each trial keys it
        "TORCHINDUCTOR_COMPILE_THREADS": "1",
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    ray.init(address=two_node_cluster.address, runtime_env={"env_vars": env}, log_to_driver=False,
             logging_level="ERROR")  # fmt: skip
    name = cache_server.server_name()
    server = cache_server.serve(env, name)  # held while the trials run, as the search holds it
    assert server is not None
    case = TrialSpec.of({**TOY, "compile": "default", "tokens": 8 * 16 * 12})
    inputs = TrialInputs(cache_server=name)
    first = run_cases("node1", tmp_path / "out", [case], Placement({"cpu": 1, "node1": 1}), inputs=inputs)
    second = run_cases("node2", tmp_path / "out", [case], Placement({"cpu": 1, "node2": 1}), inputs=inputs)

    assert first[0].status == second[0].status == "ok", (first[0].error, second[0].error)
    assert first[0].node_id != second[0].node_id
    assert (first[0].compile_cache_use, second[0].compile_cache_use) == ("miss", "hit")
    key = CacheKey.here()  # the nodes' (this machine's: the same CPU and software)
    assert [p.name for p in driver_cache.iterdir()] == [key.name], "one key, in a subdir of the root"
    assert json.loads((driver_cache / key.name / compile_cache.KEY_FILE).read_text()) == key.as_json()
    graphs = [p for p in manifest(driver_cache / key.name / "inductor") if p.startswith("fxgraph/")]
    assert graphs, "node 1's graphs reached the driver, which ran no trial"
    lines = Path(second[0].path, "result.json").read_text().splitlines()
    said = json.loads(lines[-1])["cache_sync"]  # node 2's trial: what it fetched, what it sent back
    assert "fetched" in said and "fetched 0 files" not in said, said
    copy_of = node_cache_root(str(driver_cache)).name
    for name in ("node1", "node2"):
        copy = tmp_path / f"{name}-cache" / copy_of / key.name / "inductor"
        assert set(graphs) <= set(manifest(copy)), f"{name} trained against a copy of its own"
