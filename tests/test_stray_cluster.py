"""A host where someone ran `ray start --head`: the search with no --address runs on a private local Ray,
never on that cluster, while it is alive and after it died leaving its record behind; `--address auto`
joins the live one and fails in seconds, with the environment's exit code, once it is gone.

The stray head runs with RAY_TMPDIR pointing at a folder of this test's, so its `ray_current_cluster`
record (what `ray.init()` with no address would join) is this test's alone, not the machine's.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from ray._raylet import GcsClient

from tests.answer_checks import check_answer
from tests.ray_procs import free_ports, stop_group
from tests.test_search import DATA, ENV, HEAD_PORTS, ROOT, SHORT_LOSS_RUNS, wait_for_head
from trainables.common.exit_codes import Exit

pytestmark = pytest.mark.slow

DATA_ARGS = ["--data", DATA[0]] if DATA else []
FINISHED = (Exit.OK, Exit.BASELINE_STAYS, Exit.UNTRUSTED)  # exit 4: the screen shared 2 cores with others
TINY = ["--config", "configs/smoke.yaml", *SHORT_LOSS_RUNS, "--trials", "2", "--set", "search.repeats=1"]


@pytest.fixture
def stray_head(tmp_path):
    """`ray start --head --block` in a process group of its own, its temp dir (and record) under RAY_TMPDIR."""
    temp = tempfile.mkdtemp(prefix="rs-", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    env = {**ENV, "RAY_TMPDIR": temp}
    env.pop("RAY_ADDRESS", None)
    ports = dict(zip(HEAD_PORTS, free_ports(len(HEAD_PORTS))))
    cmd = [str(Path(sys.executable).with_name("ray")), "start", "--head", "--block", "--num-cpus=1"]
    cmd += ["--node-ip-address=127.0.0.1", *(f"--{k}={v}" for k, v in ports.items())]
    cmd += ["--include-dashboard=false", "--disable-usage-stats"]
    log = tmp_path / "ray-head.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(cmd, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    address = f"127.0.0.1:{ports['port']}"
    try:
        wait_for_head(proc, address, log)
        record = Path(temp) / "ray" / "ray_current_cluster"
        deadline = time.time() + 60  # `ray start` writes it once its node is up
        while not record.exists() and time.time() < deadline:
            time.sleep(0.5)
        recorded = record.read_text().strip()  # what Ray itself would join with no address (the node's IP)
        assert recorded.endswith(f":{ports['port']}"), recorded
        address = recorded
        yield proc, address, env, record
    finally:
        stop_group(proc)
        subprocess.run(["rm", "-rf", temp], check=False)


def search(env: dict, out: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "tuner.search", "--out", str(out), *DATA_ARGS, *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def drivers(address: str) -> int:
    """Jobs (drivers) the cluster has ever had: a search that joined it would be one."""
    return len(GcsClient(address=address).get_all_job_info(timeout=10))


def test_a_stray_cluster_never_gets_the_search_alive_or_dead(tmp_path, stray_head):
    """Also a second search confirming the first one's answer (once test_answers.py's end-to-end test): the
    search beside the dead cluster has the same settings as the one beside the live cluster, and answers
    are remembered here (TUNER_FRESH=0, a cache dir of this test's), so it only re-measures."""
    proc, address, env, record = stray_head
    remembering = {**env, "TUNER_FRESH": "0", "TUNER_CACHE_DIR": str(tmp_path / "cache")}

    alive = search(remembering, tmp_path / "alive", *TINY)
    assert alive.returncode in FINISHED, alive.stderr[-3000:]
    check_answer(tmp_path / "alive", alive.returncode)
    assert "Ray: a private local instance" in alive.stderr.splitlines()[0], alive.stderr[:500]
    assert "remembered:" not in alive.stderr  # it searched (it may say "not remembered for a later search")
    assert drivers(address) == 0  # not one trial, not even a driver, on the stray cluster

    joined = joining_driver(env, tmp_path / "joined", address)
    assert joined.wait(timeout=120) == Exit.INTERRUPTED

    stop_group(proc)  # the cluster dies; its record stays, as after a crash or a reboot
    if not record.exists():
        record.write_text(address)
    dead = search(remembering, tmp_path / "dead", *TINY)
    assert dead.returncode in FINISHED, dead.stderr[-3000:]
    check_answer(tmp_path / "dead", dead.returncode)
    assert "Ray: a private local instance" in dead.stderr.splitlines()[0], dead.stderr[:500]
    confirms_the_first_answer(alive, dead, tmp_path / "alive", tmp_path / "dead")

    started = time.time()
    auto = search(env, tmp_path / "auto-dead", "--config", "configs/smoke.yaml", "--address", "auto")
    assert auto.returncode == Exit.ENVIRONMENT, auto.stderr[-3000:]
    assert time.time() - started < 30
    errors = [line for line in auto.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and address in errors[0] and str(record) in errors[0], auto.stderr


def confirms_the_first_answer(first, second, first_out: Path, second_out: Path) -> None:
    """The second search with the first's settings into a new OUT took its remembered answer: no screen, only
    re-measure runs, a confirmation report naming the first OUT."""
    if "not remembered for a later search" in first.stderr:  # its figures were contended (a busy machine)
        assert "[screen] starting" in second.stderr and "remembered:" not in second.stderr
        return
    assert "remembered: this search matches one finished" in second.stderr, (
        first.stderr[-2000:] + "\n--- the second search ---\n" + second.stderr[-2000:]
    )
    assert "[screen] starting" not in second.stderr  # taken, not run
    summary = json.loads((second_out / "summary.json").read_text())
    assert summary["remembered"]["out"] == str(first_out.resolve())
    assert {p.name for p in (second_out / "trials").iterdir()} == {"remeasure.jsonl"}
    assert "A confirmation" in (second_out / "report.md").read_text()


def joining_driver(env: dict, out: Path, address: str) -> subprocess.Popen:
    """`--address auto` joins the live cluster: its driver shows up there; then SIGTERM ends it."""
    cmd = [sys.executable, "-m", "tuner.search", "--out", str(out), *DATA_ARGS, *TINY, "--address", "auto"]
    driver = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while drivers(address) == 0:
        assert driver.poll() is None and time.time() < deadline, "the --address auto search never joined"
        time.sleep(0.5)
    driver.send_signal(signal.SIGTERM)
    return driver


def test_the_readme_tests_pass_beside_a_recorded_live_cluster(stray_head):
    """Tests that start Ray themselves (`ray.init(address="local", num_cpus=...)`, which joining refuses) start
    their own beside it: two quick ones of tests/test_gate.py on its module's Ray (the whole file, 40-60 s,
    starts no Ray of another kind: its subprocess test inits the same way)."""
    _, address, env, _ = stray_head
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_gate.py", "-k"]
    cmd += ["test_a_holder_whose_process_died or test_a_run_killed_while_compiling"]
    run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:]
    assert "2 passed" in run.stdout, run.stdout[-3000:]
    assert drivers(address) == 0
