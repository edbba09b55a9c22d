"""Where the search's Ray runs (tuner/session/ray_session.py) and who may write OUT (tuner/session/out_lock.py), through
their functions and through the CLI: local means local, an unreachable cluster is one line in seconds with
the environment's exit code, SIGTERM while connecting is an interrupt, and one driver holds OUT."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.user_env import user_env
from trainables.common.errors import EnvironmentFault
from trainables.common.exit_codes import Exit
from trainables.config import ConfigError
from tuner import search
from tuner.session.out_lock import OutLock
from tuner.session.ray_session import RayTarget, check_reachable, ray_target

ROOT = Path(__file__).resolve().parents[1]
SMOKE = str(ROOT / "configs" / "smoke.yaml")
SHAKESPEARE = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"
DATA = ["--data", str(SHAKESPEARE)] if SHAKESPEARE.exists() else []
ENV = {**user_env(), "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "TUNER_OFFLINE": "1"}


@pytest.fixture
def stale_record(tmp_path, monkeypatch):
    """Ray's record of a cluster that is gone (what an old `ray start` leaves): RAY_TMPDIR points Ray's temp
    dir here, so the record is this test's alone."""
    temp = tmp_path / "raytmp"
    (temp / "ray").mkdir(parents=True)
    (temp / "ray" / "ray_current_cluster").write_text("127.0.0.1:1\n")
    monkeypatch.setenv("RAY_TMPDIR", str(temp))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return temp / "ray" / "ray_current_cluster"


@pytest.fixture
def silent_port():
    """A TCP port that accepts connections and never answers, as a host that is not Ray's would."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    yield f"127.0.0.1:{listener.getsockname()[1]}"
    listener.close()


def test_no_address_is_a_private_local_instance_whatever_ray_recorded(stale_record):
    assert ray_target(None) == RayTarget(None, "no --address")
    assert not ray_target("local").joins
    assert "private local instance" in str(ray_target(None))


def test_auto_names_the_record_it_found(stale_record):
    target = ray_target("auto")
    assert target.address == "127.0.0.1:1" and str(stale_record) in target.source
    assert target.init_address == "auto"  # Ray resolves it again, and brings this host's token where needed
    assert (
        ray_target("127.0.0.1:1").init_address == "127.0.0.1:1" and ray_target(None).init_address == "local"
    )


def test_only_a_found_cluster_gets_the_hosts_token_unasked(monkeypatch):
    from tuner.session.ray_session import _has_token

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    assert not _has_token(RayTarget("10.0.0.9:6379", "--address auto", auto=True))
    monkeypatch.delenv("RAY_AUTH_MODE")
    assert not _has_token(RayTarget("10.0.0.9:6379", "--address"))  # named: Ray brings no token unasked


def test_auto_with_nothing_on_the_host_is_an_environment_fault(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr("ray._private.services.find_gcs_addresses", lambda: [])  # other sessions' Ray
    with pytest.raises(EnvironmentFault, match="no Ray cluster runs on this host"):
        ray_target("auto")


def test_ray_address_is_joined_and_named_but_local_wins_over_it(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.9:6379")
    assert ray_target(None) == RayTarget("10.0.0.9:6379", "RAY_ADDRESS")
    assert "from RAY_ADDRESS" in str(ray_target(None))
    assert not ray_target("local").joins


def test_ray_address_local_and_auto_mean_what_they_mean_to_ray(monkeypatch, tmp_path):
    monkeypatch.setenv("RAY_ADDRESS", "local")  # Ray's own convention: a new local instance
    assert ray_target(None) == RayTarget(None, "RAY_ADDRESS local")
    monkeypatch.setenv("RAY_ADDRESS", "auto")
    monkeypatch.setattr("ray._common.utils.get_ray_address_file", lambda _: str(tmp_path / "none"))
    monkeypatch.setattr("ray._private.services.find_gcs_addresses", lambda: ["10.0.0.7:6379"])
    found = ray_target(None)
    assert (found.address, found.auto, found.source) == (
        "10.0.0.7:6379", True, "RAY_ADDRESS auto: a Ray cluster running on this host"
    )  # fmt: skip
    monkeypatch.setattr("ray._private.services.find_gcs_addresses", lambda: [])
    with pytest.raises(EnvironmentFault, match="RAY_ADDRESS auto: no Ray cluster runs on this host"):
        ray_target(None)
    monkeypatch.setenv("RAY_ADDRESS", "bogus")
    with pytest.raises(ConfigError, match="RAY_ADDRESS: expected auto, local or HOST:PORT, got 'bogus'"):
        ray_target(None)


def test_a_ray_address_that_fails_names_ray_address_not_an_address_the_user_never_passed(
    tmp_path, monkeypatch
):
    """RAY_ADDRESS=auto with no cluster, or RAY_ADDRESS naming one that is gone: leaving --address out would
    join it again, so the line says how to run locally from there (issue 56 item 6)."""
    monkeypatch.setattr("ray._common.utils.get_ray_address_file", lambda _: str(tmp_path / "none"))
    monkeypatch.setattr("ray._private.services.find_gcs_addresses", lambda: [])
    monkeypatch.setenv("RAY_ADDRESS", "auto")
    with pytest.raises(EnvironmentFault) as auto:
        ray_target(None)
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    with pytest.raises(EnvironmentFault) as gone:
        check_reachable(ray_target(None), timeout_s=5)
    assert "127.0.0.1:1 (from RAY_ADDRESS)" in str(gone.value)
    for err in (auto, gone):
        assert "leave --address out" not in str(err.value)
        assert "pass --address local (or unset RAY_ADDRESS)" in str(err.value)
    # --address auto with RAY_ADDRESS unset: leaving --address out is the way to a local instance
    monkeypatch.delenv("RAY_ADDRESS")
    with pytest.raises(EnvironmentFault, match="or leave --address out to run on a private local instance"):
        ray_target("auto")


@pytest.mark.parametrize("bad", ["bogus", "host:", ":6379", "host:port"])
def test_a_malformed_address_is_bad_input(bad, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(ConfigError, match="expected auto, local or HOST:PORT"):
        ray_target(bad)


def test_a_refused_address_is_one_fault_naming_address_and_source(stale_record):
    started = time.monotonic()
    with pytest.raises(EnvironmentFault) as err:
        check_reachable(ray_target("auto"), timeout_s=10)
    assert time.monotonic() - started < 5
    assert (
        "127.0.0.1:1" in str(err.value)
        and str(stale_record) in str(err.value)
        and "ray stop" in str(err.value)
    )


def test_a_port_that_is_not_ray_fails_within_the_deadline(silent_port):
    started = time.monotonic()
    with pytest.raises(EnvironmentFault, match="no Ray GCS answered"):
        check_reachable(RayTarget(silent_port, "--address"), timeout_s=2)
    assert time.monotonic() - started < 6


def test_the_cli_refuses_an_unreachable_cluster_with_exit_5_before_writing(tmp_path, capsys):
    out = tmp_path / "out"
    code = search.main(["--config", SMOKE, "--out", str(out), *DATA, "--address", "127.0.0.1:1"])
    assert code == Exit.ENVIRONMENT
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "cannot reach Ray at 127.0.0.1:1 (from --address)" in errors[0], errors
    assert not out.exists()


def test_sigterm_while_connecting_is_exit_130(tmp_path, silent_port):
    """The connect hangs on a port that never answers; SIGTERM ends it as Ctrl-C would."""
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "tuner.search", "--config", SMOKE, "--out", str(out), *DATA]
    cmd += ["--address", silent_port, "--connect-timeout", "120"]
    log = tmp_path / "log"
    with log.open("w") as sink:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=sink, stderr=subprocess.STDOUT)
    deadline = time.time() + 120
    while "Ray: joining" not in log.read_text() and time.time() < deadline:
        assert proc.poll() is None, log.read_text()
        time.sleep(0.2)
    time.sleep(1)  # inside the connect
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == Exit.INTERRUPTED, log.read_text()
    assert "interrupted" in log.read_text() and "Traceback" not in log.read_text()


def _hold_lock(out: Path) -> subprocess.Popen:
    """Another driver's hold on OUT: a process that takes the lock and sleeps."""
    code = (
        "import sys, time; from pathlib import Path; from tuner.session.out_lock import OutLock; "
        "OutLock(Path(sys.argv[1])).take('python -m tuner.search --out elsewhere'); print('held', flush=True); "
        "time.sleep(600)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(out)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_the_lock_names_its_holder_and_dies_with_it(tmp_path):
    holder = _hold_lock(tmp_path)
    try:
        with pytest.raises(ConfigError, match=f"in use by another search \\(pid {holder.pid} "):
            OutLock(tmp_path).take("second")
    finally:
        holder.kill()  # SIGKILL: no clean-up of its own runs
        holder.wait()
    lock = OutLock(tmp_path)
    lock.take("third")  # the kernel released it with the process; the file left behind does not hold it
    assert json.loads(lock.path.read_text())["command"] == "third"
    lock.release()
    assert not lock.path.exists()


@pytest.mark.parametrize("resume", [False, True], ids=["plain", "resume"])
def test_a_second_driver_on_a_held_out_is_refused_and_changes_nothing(tmp_path, capsys, resume):
    out = tmp_path / "out"
    out.mkdir()
    (out / "state.json").write_text('{"phases": {}}')
    holder = _hold_lock(out)
    try:
        argv = ["--config", SMOKE, "--out", str(out), *DATA] + (["--resume"] if resume else [])
        assert search.main(argv) == Exit.BAD_INPUT
    finally:
        holder.kill()
        holder.wait()
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and f"pid {holder.pid}" in errors[0] and "--resume" not in errors[0], errors
    assert (out / "state.json").read_text() == '{"phases": {}}'


def test_a_cache_dir_that_cannot_be_made_is_refused_before_out_is(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    out = tmp_path / "out"
    argv = ["--config", SMOKE, "--out", str(out), *DATA, "--cache-dir", str(blocker / "cache")]
    assert search.main(argv) == Exit.BAD_INPUT
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "--cache-dir" in errors[0], errors
    assert not out.exists()


def test_the_baseline_kept_is_a_ray_jobs_success_and_a_shells_exit_3(monkeypatch, capsys):
    monkeypatch.delenv(search.RAY_JOB_ENV, raising=False)
    assert search.as_job_exit(Exit.BASELINE_STAYS) == Exit.BASELINE_STAYS  # a shell tells the answers apart
    monkeypatch.setenv(search.RAY_JOB_ENV, '{"runtime_env": {}, "metadata": {}}')  # as Ray's job supervisor
    assert search.as_job_exit(Exit.BASELINE_STAYS) == Exit.OK
    assert "exit 0 as a Ray Job" in capsys.readouterr().err
    for code in (Exit.OK, Exit.FAILED, Exit.UNTRUSTED, Exit.NOTHING_SCREENED, Exit.INTERRUPTED):
        assert search.as_job_exit(code) == code  # no measured answer: still a failure for the job
