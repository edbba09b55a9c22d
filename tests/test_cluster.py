"""The search on a real Ray cluster of several nodes on one machine (issue #11, "Beyond one machine").

The cluster is `ray start --head` plus `ray start --address` workers on 127.0.0.1, each with one fake GPU (so
the search takes its GPU path: one speed run per GPU at a time, a telemetry actor per GPU node) and
tests/fake_nvml.py standing in for pynvml. The worker runs under `unshare --mount` with a private tmpfs over
the driver's folder (OUT and the corpus): like a node of a real cluster, it cannot see what the driver
wrote, and what it writes there never reaches the driver. So the search must ship the corpus to the trials
through Ray and gather what they produce on the driver, and it must survive losing that node.

Needs root (unshare, mount) and the `unshare` tool; skips without them.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
from ray import exceptions as ray_exceptions
from ray._raylet import GcsClient

from tests.factories import search_context
from tests.ray_procs import free_ports, stop_group
from tests.test_failures import FakeTrial
from tests.test_telemetry import read_scalars
from tests.user_env import user_env
from trainables.common.errors import DataError
from trainables.data import Corpus, load_char_data, shipped_corpus
from trainables.trainable import _own_compile_caches
from trainables.training.gate import GATE_PREFIX
from tuner.config import load_search_config
from tuner.runs import ledger as runs_ledger
from tuner.runs.phase_progress import PhaseProgress
from tuner.session import node_loss
from tuner.state.hardware import Hardware

ROOT = Path(__file__).resolve().parents[1]
SHAKESPEARE = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"
RAY = str(Path(sys.executable).with_name("ray"))
HEAD_PORT = 6395
TINY_SEARCH = [
    "--config", "configs/smoke.yaml", "--trials", "4",
    "--set", "search.space={loader: [dataloader, device], fused_adamw: [false, true]}",
    "--set", "search.screen_steps=4", "--set", "search.repeats=1", "--set", "search.remeasure_top=1",
    "--set", "search.probe_batch=false", "--set", "train.tokens=8192", "--set", "train.eval_tokens=2048",
    "--set", "search.telemetry_hz=20",  # enough samples in the short timed windows for their timelines
]  # fmt: skip
FAKE_PYNVML = '''
    """pynvml for the test's Ray nodes: the fake NVML of tests/fake_nvml.py."""
    import sys

    import tests.fake_nvml

    sys.modules[__name__] = tests.fake_nvml
'''
# Every port a node opens, chosen free, so this cluster stays clear of other Ray instances on the machine.
NODE_PORTS = (
    "node-manager-port", "object-manager-port", "metrics-export-port", "dashboard-agent-listen-port",
    "dashboard-agent-grpc-port", "runtime-env-agent-port",
)  # fmt: skip
ENV = {
    **user_env(),
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
    "TUNER_OFFLINE": "1",
}

# The cluster tests (slow, root); the others here are quick checks of the parts, without Ray.
needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare(1)"
)


@dataclass
class Node:
    """One `ray start --block` in a process group of its own (under `unshare` when `hide` is set)."""

    name: str
    proc: subprocess.Popen
    log: Path

    def raylet(self) -> psutil.Process | None:
        for p in psutil.Process(self.proc.pid).children(recursive=True):
            try:
                if p.name() == "raylet":
                    return p
            except psutil.Error:  # ended meanwhile
                continue
        return None

    def training(self) -> int | None:
        """The pid of a trial's worker process that trains on this node (Ray titles it so while the
        trainable runs, after its start-up; training keeps a core busy, an idle reused worker does not)."""
        raylet = self.raylet()
        for p in raylet.children(recursive=True) if raylet else []:
            if "ImplicitFunc.train" in " ".join(_cmdline(p)) and _busy(p):
                return p.pid
        return None

    def stop(self) -> None:
        stop_group(self.proc)


def _busy(p: psutil.Process) -> bool:
    try:
        return p.cpu_percent(interval=0.2) > 30
    except psutil.Error:
        return False


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


@dataclass
class Cluster:
    """A head (the driver's node) and workers on 127.0.0.1; `driver_dir` holds OUT and the corpus."""

    root: Path
    nodes: list[Node] = field(default_factory=list)

    @property
    def driver_dir(self) -> Path:
        return self.root / "driver"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{HEAD_PORT}"

    def env(self) -> dict[str, str]:
        shim = self.root / "shim"
        shim.mkdir(exist_ok=True)
        (shim / "pynvml.py").write_text(textwrap.dedent(FAKE_PYNVML))
        return {**ENV, "PYTHONPATH": f"{shim}:{ROOT}", "PATH": f"{Path(sys.executable).parent}:{ENV['PATH']}"}

    def start_node(self, name: str, *, head: bool, hide: bool = False) -> Node:
        ports = dict(zip(NODE_PORTS, free_ports(len(NODE_PORTS))))
        cmd = [RAY, "start", "--block", "--node-ip-address=127.0.0.1", "--num-cpus=1", "--num-gpus=1"]
        cmd += [f"--{k}={v}" for k, v in ports.items()] + ["--disable-usage-stats"]
        if head:
            cmd += [
                "--head",
                f"--port={HEAD_PORT}",
                "--include-dashboard=false",
                f"--temp-dir={self.root / 'ray'}",
            ]
            cmd += [f"--ray-client-server-port={free_ports(1)[0]}"]
        else:
            cmd += [f"--address={self.address}"]
        if hide:  # a private tmpfs over the driver's folder: this node sees none of it, and keeps its writes
            inner = f"mount -t tmpfs tmpfs {self.driver_dir} && exec {shlex.join(cmd)}"
            cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", inner]
        log = self.root / f"{name}.log"
        proc = subprocess.Popen(
            cmd, env=self.env(), stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True
        )
        node = Node(name, proc, log)
        self.nodes.append(node)
        return node

    def wait_nodes(self, n: int, timeout: float = 120) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            for node in self.nodes:
                assert node.proc.poll() is None, f"{node.name} ended: {node.log.read_text()[-3000:]}"
            # alive in the GCS, and each node's raylet seen among its processes (under load the GCS can
            # list a node before psutil sees its raylet: a test that read it then failed in -n 2)
            if len(self.alive_nodes()) >= n and all(node.raylet() for node in self.nodes):
                return
            time.sleep(1)
        raise AssertionError(f"fewer than {n} nodes joined in {timeout:.0f} s")

    def alive_nodes(self) -> dict[str, bool]:
        """Node id -> whether it is the head, for every alive node. Through Ray's GCS client: the state API
        (`ray list nodes`) needs the dashboard, which this head leaves off."""
        try:
            infos = GcsClient(address=self.address).get_all_node_info(timeout=5)
        except Exception:  # noqa: BLE001 - the head is not up yet
            return {}
        return {i.node_id.hex(): i.is_head_node for i in infos.values() if i.state == 0}  # 0: ALIVE

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.stop()


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    """Head (driver's view, 1 CPU, 1 fake GPU) and one hidden worker (1 CPU, 1 fake GPU). Its own short
    root under /tmp (Ray's socket paths must fit 107 bytes) and head port 6395."""
    root = Path(f"/tmp/h11-{os.getpid()}")
    shutil.rmtree(root, ignore_errors=True)
    (root / "driver").mkdir(parents=True)
    c = Cluster(root)
    try:
        c.start_node("head", head=True)
        c.wait_nodes(1)
        c.start_node("hidden", head=False, hide=True)
        c.wait_nodes(2)
        yield c
    finally:
        c.stop()
        shutil.rmtree(root, ignore_errors=True)


def start_search(cluster: Cluster, out: Path, *args: str) -> subprocess.Popen:
    """The tiny search as a driver on the head, on a corpus in the driver's folder (hidden from the worker)."""
    corpus = cluster.driver_dir / "corpus.txt"
    if not corpus.exists():
        shutil.copy(SHAKESPEARE, corpus) if SHAKESPEARE.exists() else corpus.write_text(_some_text())
    cmd = [sys.executable, "-m", "tuner.search", "--out", str(out), "--data", str(corpus)]
    cmd += ["--address", cluster.address, *TINY_SEARCH, *args]
    log = (cluster.root / "search.log").open("w")
    return subprocess.Popen(
        cmd, cwd=ROOT, env=ENV, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )


def _some_text() -> str:
    return (ROOT / "docs" / "architecture.md").read_text() * 40


def search_log(cluster: Cluster) -> str:
    return (cluster.root / "search.log").read_text()


def ledger(out: Path, phase: str) -> list[dict]:
    path = out / "trials" / f"{phase}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.slow
@needs_root
def test_a_search_on_two_nodes_gathers_every_trials_results_on_the_driver(cluster):
    """Trials on both nodes; those of the node that cannot see OUT train on the driver's corpus and their
    results, TensorBoard events and GPU timelines all land in OUT on the driver."""
    (hidden,) = [node for node, head in cluster.alive_nodes().items() if not head]
    worker = cluster.nodes[1]
    corpus_there = (
        Path(f"/proc/{worker.raylet().pid}/root") / cluster.driver_dir.relative_to("/") / "corpus.txt"
    )
    out = cluster.driver_dir / "out"
    proc = start_search(cluster, out)
    assert not corpus_there.exists(), "the worker sees the driver's folder: the test would prove nothing"
    # 4: both nodes share this machine's cores, so its timed windows may all be contended
    assert proc.wait(timeout=400) in (0, 3, 4), search_log(cluster)[-4000:]
    log = search_log(cluster)
    assert f"trial results: gathered by this driver into {out}" in log

    s = json.loads((out / "summary.json").read_text())
    nodes = set(cluster.alive_nodes())
    trials = s["trials"]
    assert not [t for t in trials if t["status"] == "error"], [t["error"] for t in trials]
    assert {t["node_id"] for t in trials} == nodes, "trials ran on both nodes"
    assert {g["node_id"] for g in s["gpu_usage"]} == nodes, "a telemetry actor answered on every node"
    # runs beside the screen and ahead of the loss check are Ray tasks, not Tune trials: no folder of their own
    tasks = {"baseline", "loss_check_ahead"}
    assert not [t["id"] for t in trials if not t["path"] and t["phase"] not in tasks]
    for t in [
        t for t in trials if t["path"]
    ]:  # Tune's results and TB events, on the driver, hidden node or not
        folder = Path(t["path"])
        assert folder.parent.parent == out / "ray", t["path"]
        assert (
            json.loads((folder / "result.json").read_text().splitlines()[-1])["trial_id"] == t["ray_trial_id"]
        )
        tags = {tag for tag, *_ in read_scalars(folder)}
        assert "ray/tune/tokens_per_s" in tags, (t["id"], sorted(tags)[:20])
    # a baseline task timed on the hidden node has a window but no folder: only trials carry events
    timed = [Path(t["path"]) for t in trials if t["node_id"] == hidden and t["window_t1"] and t["path"]]
    joined = [p for p in timed if "telemetry/gpu0/power_w" in {tag for tag, *_ in read_scalars(p)}]
    assert joined, "the hidden node's GPU timelines reached the driver's TensorBoard events"
    assert any(r["id"] in s["telemetry"]["timelines"] for r in trials), "timelines in summary.json"
    assert not [n for n in named_actors(cluster) if n.startswith(GATE_PREFIX)], "timing gates outlived it"


def named_actors(cluster: Cluster) -> list[str]:
    """The named actors alive on the cluster, asked by a driver of its own."""
    code = "import ray; ray.init(); print(*[a['name'] for a in ray.util.list_named_actors(True)], sep='\\n')"
    env = {**ENV, "RAY_ADDRESS": cluster.address}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()


def finished_rows(out: Path) -> dict[str, dict]:
    """Every finished trial of every phase so far, by its Ray trial id; a loss run trained as a Ray task (the
    baseline's beside the screen, a candidate's ahead of the loss check) has none: by its phase and id."""
    rows = [json.loads(line) for f in out.glob("trials/*.jsonl") for line in f.read_text().splitlines()]
    by_trial = {r["ray_trial_id"] or f"{r['phase']}/{r['id']}": r for r in rows}
    assert len(by_trial) == len(rows), "a Ray trial has two rows"
    return by_trial


def running_here(out: Path, node_id: str) -> set[str]:
    """Trials whose last result the driver got says they are running on `node_id`, not done: Tune's
    result.json in OUT, one line per report, the last one flushed as it arrives."""
    running = set()
    for result in out.glob("ray/*/*/result.json"):
        lines = result.read_text().splitlines()
        last = json.loads(lines[-1]) if lines else {}
        if last.get("node_id") == node_id and last.get("status") == "running" and not last.get("done"):
            running.add(last["trial_id"])
    return running


def kill_raylet_mid_trial(
    cluster: Cluster, node: Node, out: Path, proc: subprocess.Popen, timeout: float = 300
) -> dict:
    """SIGKILL the node's raylet once a trial has finished and another one has run on the node for a
    second, by the driver's own record (its last report says running there, not done) and by a worker
    busy training there, with no row finishing meanwhile; returns the rows finished by then. The busy
    worker alone is not enough: one that has just ended its trial stays busy a while, and the screen
    starts the next only once Ray has room for it (CI once killed in that gap: no trial was lost)."""
    node_id = next(i for i, head in cluster.alive_nodes().items() if not head)
    deadline, since, watched = time.time() + timeout, None, None
    while time.time() < deadline and proc.poll() is None:
        pid = node.training()
        done = finished_rows(out) if (out / "trials").exists() else {}
        running = running_here(out, node_id) - set(done)
        state = (pid, len(done), frozenset(running))
        if pid is None or not running or state != watched:  # nothing, a new trial, or one just finished
            since, watched = time.time(), state
        elif done and time.time() - since > 1.0:
            node.raylet().send_signal(signal.SIGKILL)
            return done
        time.sleep(0.2)
    raise AssertionError("no trial trained on the worker after the first one finished")


@pytest.mark.slow
@needs_root
def test_a_node_lost_mid_search_costs_its_running_trial_a_rerun_and_nothing_else(cluster):
    out = cluster.driver_dir / "out"
    # screen runs of a few seconds, none stopped early: the kill finds one mid-run
    proc = start_search(cluster, out, "--set", "search.screen_steps=80", "--set", "search.early_stop_ratio=0")
    before = kill_raylet_mid_trial(cluster, cluster.nodes[1], out, proc)
    # 4: both nodes share this machine's cores, so its timed windows may all be contended
    assert proc.wait(timeout=400) in (0, 3, 4), search_log(cluster)[-4000:]
    log = search_log(cluster)
    lost = re.findall(r"\[(\w+)\] Ray trial (\w+) was lost with its node \w+: reruns", log)
    assert lost, log[-4000:]

    after = finished_rows(out)
    assert all(after[trial] == row for trial, row in before.items()), "a finished trial was changed or lost"
    assert not {trial for _, trial in lost} & set(after), "a lost trial was recorded"
    assert not [r for r in after.values() if r["status"] == "error"], log[-4000:]
    s = json.loads((out / "summary.json").read_text())
    assert len({t["id"] for t in s["trials"]}) == len(s["trials"])
    for phase, _ in lost:  # rerun in a fresh experiment, every trial of the phase counted once
        assert (out / "ray" / f"{phase}-r1").is_dir()
    screen = [t for t in s["trials"] if t["phase"] == "screen"]
    assert len(screen) == 4 and len({json.dumps(t["config"], sort_keys=True) for t in screen}) == 4


# ------------------------------------------------------------------------------ the parts, without Ray


def test_a_trial_trains_on_the_shipped_corpus_by_its_hash_and_reads_no_file():
    corpus = Corpus("to be, or not to be: that is the question\n" * 50, "the driver's file")
    nowhere = "/nonexistent/corpus.txt"
    with shipped_corpus(corpus):
        data = load_char_data(nowhere, expect_sha256=corpus.sha256)
        assert data.corpus.text == corpus.text and len(data.train) + len(data.val) == len(corpus.text)
        with pytest.raises(DataError, match="no such file"):  # pinned to other text: not this corpus
            load_char_data(nowhere, expect_sha256="0" * 64)
    with pytest.raises(DataError, match="no such file"):  # shipped to that trial only
        load_char_data(nowhere, expect_sha256=corpus.sha256)


def lost_trial(monkeypatch, trial_id: str, message: str, node_alive: bool) -> FakeTrial:
    trial = FakeTrial(trial_id, 0, {"trial_id": trial_id, "node_id": "a" * 56, "pid": 7})
    monkeypatch.setattr(runs_ledger, "trial_error", lambda t: ray_exceptions.RayActorError(error_msg=message))
    monkeypatch.setattr(node_loss, "node_gone", lambda node_id: not node_alive)
    return trial


def test_a_trial_lost_with_its_node_gets_no_row_while_it_can_rerun_then_says_so(
    tmp_path, monkeypatch, capsys
):
    ledger = runs_ledger.Ledger(tmp_path, "screen")
    progress = PhaseProgress("screen", 3, 0, 0.0)  # the phase's lines, told by the recorder
    record = runs_ledger.LedgerRecorder(ledger, rerun_lost=True, progress=progress)
    trial = lost_trial(monkeypatch, "a", "The actor died unexpectedly before finishing this task.", False)
    record.on_trial_error(0, [trial], trial)
    assert record.lost == ["a"] and ledger.rows() == [] and record.failure is None
    assert "[screen] Ray trial a was lost with its node aaaaaaaa: reruns" in capsys.readouterr().err
    record = runs_ledger.LedgerRecorder(ledger, rerun_lost=False)  # the last rerun: it fails
    record.on_trial_error(0, [trial], trial)
    (row,) = ledger.rows()
    assert row.status == "error" and row.error.startswith("NodeDied: the trial's node aaaaaaaa died")


def test_a_worker_killed_on_a_live_node_is_the_trials_own_failure(tmp_path, monkeypatch):
    ledger = runs_ledger.Ledger(tmp_path, "screen")
    record = runs_ledger.LedgerRecorder(ledger, rerun_lost=True)
    trial = lost_trial(monkeypatch, "b", "The actor died unexpectedly before finishing this task.", True)
    record.on_trial_error(0, [trial], trial)
    (row,) = ledger.rows()
    assert record.lost == [] and row.error.startswith("WorkerDied")
    assert node_loss.died_with_node(
        ray_exceptions.RayActorError(error_msg="its node has died. Node Id: x"), None
    )


def test_a_cpu_speed_run_takes_the_cores_of_one_node_not_of_the_cluster(tmp_path):
    cfg = load_search_config(str(ROOT / "configs" / "smoke.yaml"))
    ctx = search_context(cfg, tmp_path, hw=Hardware(), cluster_cpus=4, node_cpus=2)
    assert ctx.placement.speed().resources == {"cpu": 2}  # two 2-CPU workers: a 4-CPU trial fits nowhere


def test_a_node_that_cannot_write_outs_compile_cache_compiles_into_its_own(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/proc/no-out-here/compile-cache/inductor")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "compile-cache" / "triton"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "node-temp"))
    _own_compile_caches()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(
        tmp_path / "node-temp" / "hybrid-tuner-compile-cache" / "inductor"
    )
    assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path / "compile-cache" / "triton")  # writable: kept
