"""Failures a search must survive and say plainly: a trial's worker killed mid-run, a crash inside a phase,
a baseline that cannot train (Ctrl-C and SIGTERM: tests/test_signals.py). Each failed trial is blamed on the Ray trial that failed, in one line; a failed search leaves no Ray
process behind and ends with the command to run next.

The runner tests drive real Ray Tune in this process (workers reused, as on a CPU); the search tests run
`python -m tuner.search` as a user would, on the toy workload (tests/toy_workload.py, no corpus needed).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import yaml
from toy_workload import TOY

from tests.user_env import user_env
from trainables.spec import LABELS, TrialSpec
from tuner.runs.ledger import RETELL_S, Ledger, LedgerRecorder
from tuner.runs.request import Placement
from tuner.runs.tune import run_cases

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
ENV = {**user_env(), "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "TUNER_OFFLINE": "1"}
ENV["PYTHONPATH"] = os.pathsep.join(filter(None, (str(TESTS), str(ROOT), os.environ.get("PYTHONPATH"))))


class FakeTrial:
    """What LedgerRecorder reads of a Ray Tune trial."""

    def __init__(self, trial_id: str, case: int, last_result: dict):
        self.trial_id, self.last_result = trial_id, last_result
        self.config = TrialSpec.of(TOY).labelled(case=case, repeat=0).as_tune()
        self.path, self.status, self.pickled_error_file = None, "TERMINATED", None


def test_rows_are_keyed_by_the_ray_trial_not_by_what_its_reused_worker_last_said(tmp_path):
    ledger = Ledger(tmp_path, "screen")
    record = LedgerRecorder(ledger)
    first = FakeTrial("a", 0, {"trial_id": "a", "status": "ok", "tokens_per_s": 900.0, "steps": 40, "pid": 7})
    # The next trial on the same reused worker, which died before it was reset for it: all Ray has for it
    # are the worker's auto-filled metrics, which still name the trial before.
    second = FakeTrial("b", 1, {"trial_id": "a", "pid": 7, "tokens_per_s": 900.0, "steps": 40})
    record.on_trial_complete(0, [first, second], first)
    record.on_trial_error(0, [first, second], second)
    record.on_trial_error(0, [first, second], first)  # a late failure report for a finished trial
    rows = ledger.rows()
    assert [(r.id, r.ray_trial_id, r.case, r.status) for r in rows] == [
        ("screen-0", "a", 0, "ok"),
        ("screen-1", "b", 1, "error"),
    ]
    assert (rows[0].tokens_per_s, rows[0].steps) == (900.0, 40)
    assert (rows[1].tokens_per_s, rows[1].steps, rows[1].pid) == (None, None, None)


def trial_dirs(out: Path) -> dict[int, Path]:
    """Case -> the folder of the Ray trial that ran it (OUT/ray/<phase>/<phase>_<trial id>)."""
    found = {}
    for params in out.glob("ray/*/*/params.json"):
        found[json.loads(params.read_text())["train"][LABELS]["case"]] = params.parent
    return found


def kill_when_reported(out: Path, case: int, killed: dict, timeout_s: float = 120) -> None:
    """SIGKILL the worker running `case` once the trial has reported (its pid is in its result.json)."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        folder = trial_dirs(out).get(case)
        lines = (folder / "result.json").read_text().splitlines() if folder else []
        result = json.loads(lines[-1]) if lines else {}
        if result.get("tokens_per_s"):
            killed.update(pid=result["pid"], trial_id=result["trial_id"], tokens_per_s=result["tokens_per_s"])
            os.kill(result["pid"], signal.SIGKILL)
            return
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.timeout(600)  # case 1 would train for many minutes if the kill never came
def test_a_killed_worker_fails_its_own_trial_and_no_other(tmp_path, one_cpu_ray, capfd):
    cases = [TrialSpec.of({**TOY, "seed": i}) for i in range(3)]
    cases[1] = cases[1].with_train(tokens=8 * 16 * 400_000)  # runs for minutes unless killed
    killed: dict = {}
    killer = threading.Thread(target=kill_when_reported, args=(tmp_path, 1, killed), daemon=True)
    killer.start()
    rows = run_cases("p", tmp_path, cases, Placement({"cpu": 1}, 1, reuse_actors=True))
    killer.join(timeout=10)
    assert killed, "case 1 never reported"

    by_case = {r.case: r for r in rows}
    assert sorted(by_case) == [0, 1, 2] and len(rows) == 3
    dead = by_case[1]
    assert dead.status == "error" and dead.ray_trial_id == killed["trial_id"]
    assert killed["tokens_per_s"] > 0, "it had reported a speed before it was killed"
    assert dead.tokens_per_s is None and dead.val_loss is None and dead.window_t0 is None
    assert f"pid {killed['pid']}" in dead.error and "worker process" in dead.error
    folders = trial_dirs(tmp_path)
    for case in (0, 2):
        row = by_case[case]
        assert row.status == "ok" and row.tokens_per_s and row.steps == 40 and row.val_loss is not None
        assert row.ray_trial_id == folders[case].name.removeprefix("p_")  # the trial that produced it
    assert by_case[0].pid == killed["pid"], "case 0 ran on the worker that case 1 reused"
    assert len({r.ray_trial_id for r in rows}) == len({r.id for r in rows}) == 3

    said = capfd.readouterr()
    text = said.out + said.err
    failed = [line for line in text.splitlines() if "failed" in line and killed["trial_id"] in line]
    assert len(failed) == 1 and dead.id in failed[0], text[-3000:]
    assert "Traceback" not in text and "OOM killer" not in text, text[-3000:]


# --- the search CLI ---

TOY_SEARCH = {
    "train": {**TOY, "tokens": 8 * 16 * 30},
    "search": {
        "space": {"batch_size": [8, 16], "fused_adamw": [False, True]},
        "trials": 3,
        "screen_steps": 4,
        "loss_check_top": 1,
        "remeasure_top": 1,
        "repeats": 1,
    },
}

# Runs the search with a phase made to crash mid-experiment: recording the screen's first trial fails.
CRASHING = """
import sys
import tuner.runs.ledger
from tuner import search

def crash(*args, **kwargs):
    raise RuntimeError("injected failure")

tuner.runs.ledger.LedgerRecorder._finish = crash
sys.exit(search.main(sys.argv[1:]))
"""


def write_config(tmp_path: Path) -> Path:
    path = tmp_path / "toy-search.yaml"
    path.write_text(yaml.safe_dump(TOY_SEARCH))
    return path


def watch(proc: subprocess.Popen, log: Path, until: str | None, sig: int) -> dict[psutil.Process, str]:
    """The processes the search started (every descendant seen while it ran, with its command line);
    `sig` to the search once `until` shows in its log."""
    seen: dict[psutil.Process, str] = {}
    deadline = time.time() + 300
    while proc.poll() is None and time.time() < deadline:
        try:
            for child in psutil.Process(proc.pid).children(recursive=True):
                if child not in seen:
                    seen[child] = " ".join(child.cmdline())
        except psutil.Error:
            pass  # it or a child ended while we looked
        if until and until in log.read_text():
            proc.send_signal(sig)
            until = None
        time.sleep(0.1)
    proc.wait(timeout=120)
    return seen


def left_running(seen: dict[psutil.Process, str], grace_s: float = 15) -> list[str]:
    """Those of `seen` still running after `grace_s` (psutil checks they are the same processes)."""
    deadline = time.time() + grace_s
    while True:
        alive = [p for p in seen if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        if not alive or time.time() > deadline:
            return [f"{p.pid} {seen[p][:100]}" for p in alive]
        time.sleep(0.5)


def search_subprocess(
    tmp_path: Path, argv: list[str], code: str | None = None, until: str | None = None, sig: int = 0
):
    """The search as a subprocess in `tmp_path`: (exit code, its output, the processes it started)."""
    log = tmp_path / "search.log"
    cmd = [sys.executable, "-c", code, *argv] if code else [sys.executable, "-m", "tuner.search", *argv]
    with log.open("w") as sink:
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=ENV, stdout=sink, stderr=sink, start_new_session=True)
        try:
            seen = watch(proc, log, until, sig)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    assert any("raylet" in line for line in seen.values()), "the search started no Ray of its own"
    return proc.returncode, log.read_text(), seen


def resume_hint(line: str) -> list[str]:
    """The command a last line tells the user to run."""
    return shlex.split(line[line.index("python -m tuner.search") :])


@pytest.mark.slow
def test_a_crash_in_a_phase_leaves_no_ray_process_and_says_what_to_run_next(tmp_path):
    out = tmp_path / "out"
    argv = ["--config", str(write_config(tmp_path)), "--out", str(out), "--set", "search.seed=3"]
    rc, text, seen = search_subprocess(tmp_path, argv, code=CRASHING)
    assert rc == 1, text[-3000:]
    assert not left_running(seen), left_running(seen)
    last = text.strip().splitlines()[-2:]
    assert last[0].startswith("error: the search failed in phase screen: RuntimeError: injected failure")
    assert str(out / "crash.log") in last[0] and "Traceback" in (out / "crash.log").read_text()
    assert "Traceback" not in text
    assert resume_hint(last[1]) == ["python", "-m", "tuner.search", *argv, "--resume"]
    assert "worker failed" not in text, "a finished trial was recorded as failed"


@pytest.mark.slow
def test_a_failure_before_anything_was_written_leaves_no_out_and_no_ray(tmp_path):
    out = tmp_path / "never"
    script = CRASHING.replace("tuner.runs.ledger.LedgerRecorder._finish", "search.open_context")
    argv = ["--config", str(write_config(tmp_path)), "--out", str(out)]
    rc, text, seen = search_subprocess(tmp_path, argv, code=script)
    assert rc == 1 and text.strip().splitlines()[-1].startswith("error: the search failed"), text[-2000:]
    assert not out.exists()
    assert not left_running(seen), left_running(seen)


@pytest.mark.slow
def test_a_baseline_that_cannot_train_ends_with_the_command_that_shows_why(tmp_path):
    # A workload that loads (the preflight passes it: a missing one is exit 2 before Ray) but whose loss
    # fails in training.
    config = str(write_config(tmp_path))
    argv = ["--config", config, "--out", "out", "--set", "train.workload=toy_workload:make_broken_workload"]
    rc, text, seen = search_subprocess(tmp_path, argv)  # every trial fails, the baseline's loss run too
    assert rc == 1, text[-3000:]
    assert not left_running(seen), left_running(seen)
    error, hint = text.strip().splitlines()[-2:]
    assert error.startswith("error: the baseline run failed") and "broken on purpose" in error, text[-2000:]
    command = shlex.split(hint[hint.index("python -m trainables.train") :])
    assert command[3:] == ["--config", config, "--set", "workload=toy_workload:make_broken_workload"]
    alone = subprocess.run(command, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120)
    assert alone.returncode == 1 and "broken on purpose" in alone.stderr, alone.stderr


def test_an_interrupt_a_library_masked_with_its_own_error_still_exits_130(tmp_path, monkeypatch, capsys):
    # CI, 2026-11-27: SIGTERM landed inside Optuna's journal lock, whose clean-up raised FileNotFoundError
    # over it; the search said it had failed (exit 1) instead of stopped (130).
    from tuner import search

    def lock_cleanup_raises_over_the_interrupt(*args):
        (tmp_path / "out").mkdir()
        (tmp_path / "out" / "state.json").write_text('{"phases": {}}')  # a search under way: resumable
        try:
            raise KeyboardInterrupt("stopped by SIGTERM")
        except KeyboardInterrupt:
            raise FileNotFoundError("out/search/optuna.journal.lock-1.rename") from None

    monkeypatch.setattr(search, "_search", lock_cleanup_raises_over_the_interrupt)
    argv = ["--config", str(write_config(tmp_path)), "--out", str(tmp_path / "out")]
    assert search.main(argv) == 130
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("interrupted: stopped by SIGTERM; OUT is resumable"), last


def test_listeners_are_told_the_rows_again_while_no_trial_finishes(tmp_path):
    # The loss runs ahead of the loss check start when a place frees, which is not when a trial ends: a
    # screen on one H200 had no trial ending in its last 85 s, and its fused finalists never trained ahead.
    told: list[int] = []
    record = LedgerRecorder(Ledger(tmp_path, "screen"), on_row=lambda rows: told.append(len(rows)))
    first = FakeTrial("a", 0, {"trial_id": "a", "status": "ok", "tokens_per_s": 900.0, "steps": 40, "pid": 7})
    record.on_trial_complete(0, [first], first)
    assert told == [1]
    record.on_step_begin(1, [first])
    assert told == [1]  # told a moment ago: not again yet
    record.last_told -= RETELL_S
    record.on_step_begin(2, [first])
    assert told == [1, 1]  # the same rows, told again with no new one
