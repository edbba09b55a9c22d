"""Signals as a user sends them: Ctrl-C through `| tee` (the whole pipeline gets SIGINT, so the pipe closes
under the search), SIGTERM into a pipe, and SIGKILL of the driver (no Ray process of its session may
outlive it by more than a few seconds). Each runs `python -m tuner.search` as a subprocess."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[1]
SHAKESPEARE = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"
DATA = ["--data", str(SHAKESPEARE)] if SHAKESPEARE.exists() else []
ENV = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "TUNER_OFFLINE": "1"}
ENV["PYTHONPATH"] = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))

pytestmark = pytest.mark.slow


def command(out: Path) -> list[str]:
    return [sys.executable, "-m", "tuner.search", "--config", "configs/smoke.yaml", "--out", str(out), *DATA]


def wait_for(log: Path, needle: str, proc: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if log.exists() and needle in log.read_text(errors="replace"):  # tee may not have made it yet
            return
        time.sleep(0.2)
    raise AssertionError(f"never printed {needle!r}: {log.read_text(errors='replace')[-2000:]}")


def test_ctrl_c_through_tee_exits_130_not_a_crash(tmp_path):
    """`python -m tuner.search ... 2>&1 | tee LOG`, Ctrl-C: SIGINT to the search and to tee alike."""
    out, log = tmp_path / "out", tmp_path / "tee.log"
    driver = subprocess.Popen(
        command(out), cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, process_group=0
    )
    tee = subprocess.Popen(
        ["tee", str(log)], stdin=driver.stdout, stdout=subprocess.DEVNULL, process_group=driver.pid
    )
    driver.stdout.close()  # tee holds the only reading end
    try:
        wait_for(log, "[screen] starting", driver)
        os.killpg(driver.pid, signal.SIGINT)  # what the terminal sends to the foreground pipeline
        assert driver.wait(timeout=120) == 130, log.read_text()[-2000:]
    finally:
        if driver.poll() is None:
            driver.kill()
        tee.wait(timeout=10)
    assert tee.returncode != 0  # tee really died of the Ctrl-C: the search wrote into a closed pipe
    assert not (out / "crash.log").exists()
    assert (out / "state.json").exists()


def test_sigterm_into_a_pipe_prints_the_resume_command_last(tmp_path):
    out = tmp_path / "out"
    driver = subprocess.Popen(
        command(out), cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines = []
    for line in driver.stdout:
        lines.append(line)
        if "[screen] starting" in line:
            driver.send_signal(signal.SIGTERM)
            break
    lines += driver.stdout.readlines()
    assert driver.wait(timeout=120) == 130, "".join(lines)[-2000:]
    last = lines[-1].strip()
    assert last.startswith("interrupted: stopped by SIGTERM; OUT is resumable: python -m tuner.search"), last
    assert last.endswith("--resume")


def _ray_session(procs: list[psutil.Process]) -> str:
    for proc in procs:
        for arg in proc.cmdline():
            if arg.startswith("--session-name="):
                return arg.split("=", 1)[1]
    raise AssertionError("no Ray process names its session")


def _alive(pids: dict[int, float]) -> list[str]:
    left = []
    for pid, created in pids.items():
        try:
            proc = psutil.Process(pid)
            if proc.create_time() == created and proc.status() != psutil.STATUS_ZOMBIE:
                left.append(f"{pid} {' '.join(proc.cmdline())[:100]}")
        except psutil.Error:
            continue
    return left


def test_a_sigkilled_driver_leaves_no_ray_process_10_s_later(tmp_path):
    out, log = tmp_path / "out", tmp_path / "run.log"
    with log.open("w") as f:
        driver = subprocess.Popen(command(out), cwd=ROOT, env=ENV, stdout=f, stderr=f)
    try:
        wait_for(log, "[screen] 1/", driver)  # a trial worker has run: every kind of Ray process is up
        ray_procs = [
            p
            for p in psutil.Process(driver.pid).children(recursive=True)
            if "tuner.reaper" not in p.cmdline()
        ]
        session = _ray_session(ray_procs)
        pids = {p.pid: p.create_time() for p in ray_procs}
        driver.kill()
        driver.wait()
        time.sleep(10)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert len(pids) >= 4  # GCS, raylet, the agents, workers: what there was to end
    assert not _alive(pids), _alive(pids)
    same_session = [
        p.pid for p in psutil.process_iter(["cmdline"]) if session in " ".join(p.info["cmdline"] or [])
    ]
    assert not same_session, same_session
