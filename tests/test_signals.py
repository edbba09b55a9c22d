"""Signals as a user sends them: Ctrl-C through `| tee` (the whole pipeline gets SIGINT, so the pipe closes
under the search), SIGTERM into a pipe, and SIGKILL of the driver (no Ray process of its session may
outlive it by more than a few seconds). Each runs `python -m tuner.search` as a subprocess. An interrupted
search exits 130, leaves no Ray process, keeps what finished and ends with the whole command that resumes it;
the resume itself is tests/test_search.py's kill-and-cut test."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.test_failures import left_running
from tests.user_env import user_env
from tuner.session.ray_session import REAPER

ROOT = Path(__file__).resolve().parents[1]
SHAKESPEARE = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"
DATA = ["--data", str(SHAKESPEARE)] if SHAKESPEARE.exists() else []
ENV = {**user_env(), "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "TUNER_OFFLINE": "1"}
ENV["PYTHONPATH"] = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))

pytestmark = pytest.mark.slow


SMOKE = ["--config", str(ROOT / "configs" / "smoke.yaml"), *DATA]


def command(out: Path | None) -> list[str]:
    """The smoke search; with no OUT, into the default one (out/search under the cwd)."""
    return [sys.executable, "-m", "tuner.search", *SMOKE, *(["--out", str(out)] if out else [])]


def descendants(proc: subprocess.Popen) -> dict[psutil.Process, str]:
    """The processes the search has started so far (Ray's among them), with their command lines."""
    found = {}
    for child in psutil.Process(proc.pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            found[child] = " ".join(child.cmdline())
    return found


def resume_hint(line: str) -> list[str]:
    """The command a last line tells the user to run."""
    return shlex.split(line[line.index("python -m tuner.search") :])


def wait_for(log: Path, needle: str, proc: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if log.exists() and needle in log.read_text(errors="replace"):  # tee may not have made it yet
            return
        time.sleep(0.2)
    raise AssertionError(f"never printed {needle!r}: {log.read_text(errors='replace')[-2000:]}")


def default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_through_tee_exits_130_not_a_crash(tmp_path):
    """`python -m tuner.search ... 2>&1 | tee LOG`, Ctrl-C: SIGINT to the search and to tee alike."""
    out, log = tmp_path / "out", tmp_path / "tee.log"
    # A shell's background job (`.ci/run ... &`) starts with SIGINT ignored, and children inherit that:
    # tee then outlived the Ctrl-C. A terminal's foreground pipeline has the default.
    driver = subprocess.Popen(
        command(out),
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        process_group=0,
        preexec_fn=default_sigint,
    )
    tee = subprocess.Popen(
        ["tee", str(log)],
        stdin=driver.stdout,
        stdout=subprocess.DEVNULL,
        process_group=driver.pid,
        preexec_fn=default_sigint,
    )
    driver.stdout.close()  # tee holds the only reading end
    try:
        wait_for(log, "[screen] 2/", driver)  # two screen rows finished: what resume must keep
        seen = descendants(driver)
        os.killpg(driver.pid, signal.SIGINT)  # what the terminal sends to the foreground pipeline
        code, still = wait_or_name(driver, seen, 120)
    finally:
        if driver.poll() is None:
            driver.kill()
        tee.wait(timeout=10)
    assert code == 130, (code, still, log.read_text()[-2000:])
    assert tee.returncode != 0  # tee really died of the Ctrl-C: the search wrote into a closed pipe
    assert not (out / "crash.log").exists()
    assert not left_running(seen), left_running(seen)
    state = json.loads((out / "state.json").read_text())
    assert "probe" in state["phases"] and "screen" not in state["phases"]
    finished = (out / "trials" / "screen.jsonl").read_text().splitlines()
    assert 2 <= len(finished) < 8  # what finished is kept for --resume


def wait_or_name(proc: subprocess.Popen, seen: dict, timeout_s: float) -> tuple[int | None, list[str]]:
    """Its exit code, or None and what of `seen` still runs (for the failure message) if it has not ended."""
    try:
        return proc.wait(timeout=timeout_s), []
    except subprocess.TimeoutExpired:
        return None, left_running(seen, grace_s=0)


def test_sigterm_into_a_pipe_prints_the_whole_resume_command_last(tmp_path):
    # no --out, from the user's own folder: the hint spells out the OUT it wrote (out/search)
    driver = subprocess.Popen(
        command(None), cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines, seen = [], {}
    for line in driver.stdout:
        lines.append(line)
        if "[screen] 1/" in line:
            seen = descendants(driver)
            driver.send_signal(signal.SIGTERM)
            break
    rest, _ = driver.communicate(timeout=150)  # bounded: a process that kept the pipe open fails, not hangs
    lines += rest.splitlines(keepends=True)
    assert driver.wait(timeout=120) == 130, "".join(lines)[-2000:]
    assert seen and not left_running(seen), left_running(seen)
    last = lines[-1].strip()
    assert last.startswith("interrupted: stopped by SIGTERM; OUT is resumable: python -m tuner.search"), last
    assert resume_hint(last) == ["python", "-m", "tuner.search", *SMOKE, "--out", "out/search", "--resume"]
    assert (tmp_path / "out" / "search" / "state.json").exists()


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
            p for p in psutil.Process(driver.pid).children(recursive=True) if str(REAPER) not in p.cmdline()
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
