"""bench/decisions_diff.py on two hand-made OUT dirs: a summary.json and a real Optuna journal each, run as
a user runs it (a subprocess), judged by its exit code and the lines it marks."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import FrozenTrial, TrialState

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "decisions_diff.py"
SPACE = {
    "batch_size": CategoricalDistribution([8, 16, 32]),
    "precision": CategoricalDistribution(["fp32", "bf16"]),
}
T0 = datetime(2026, 11, 28, 12, 0, 0)

# The screen's trials, one after another (each proposed once the one before finished): config, tok/s.
SCREEN = [({"batch_size": 16, "precision": "bf16"}, 700.0), ({"batch_size": 32, "precision": "fp32"}, 900.0)]
PROPOSED_THIRD = {"batch_size": 32, "precision": "bf16"}
BASELINE = {
    "id": "baseline",
    "phase": "baseline",  # as summary.json lists the baseline's loss run
    "config": {},
    "status": "ok",
    "val_loss": 2.0123,
    "train_loss": 1.9,
}
CONTENDER = {"id": "loss_check_0-0", "phase": "loss_check_0", "config": {"batch_size": 32}, "status": "ok"}


def make_out(path: Path, screen, loss_rows, best=None) -> Path:
    """An OUT as a search leaves it, with what the comparison reads: the study and summary.json."""
    path.mkdir()
    study = optuna.create_study(
        study_name="screen",
        direction="maximize",
        storage=JournalStorage(JournalFileBackend(str(path / "optuna.journal"))),
    )
    for n, (params, value) in enumerate(screen):
        start = T0 + timedelta(seconds=10 * n)
        study.add_trial(
            FrozenTrial(
                number=n,
                state=TrialState.COMPLETE,
                value=value,
                datetime_start=start,
                datetime_complete=start + timedelta(seconds=5),
                params=params,
                distributions={k: SPACE[k] for k in params},
                user_attrs={},
                system_attrs={},
                intermediate_values={},
                trial_id=n,
            )
        )
    screen_rows = [
        {"id": f"screen-{n}", "phase": "screen", "config": p, "tokens_per_s": v}
        for n, (p, v) in enumerate(screen)
    ]
    summary = {
        "trials": screen_rows + loss_rows,
        "loss_gate": {"baseline_loss": 2.0123, "tolerance": 0.05, "mode": "absolute", "limit": 2.0623},
        "baseline": {"tokens_per_s": 600.0},
        "best": best,
    }
    (path / "summary.json").write_text(json.dumps(summary))
    return path


def diff(a: Path, b: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(a), str(b)], capture_output=True, text=True, timeout=120
    )


def marked(stdout: str, mark: str) -> list[str]:
    return [line.strip() for line in stdout.splitlines() if line.strip().startswith(mark + " ")]


def contender(val_loss: float, feasible: bool) -> dict:
    return {**CONTENDER, "val_loss": val_loss, "train_loss": 2.01, "feasible": feasible}


def test_the_same_decisions_exit_0_however_the_winner_was_timed(tmp_path):
    screen = [*SCREEN, (PROPOSED_THIRD, 800.0)]
    rows = [BASELINE, contender(2.04, True)]
    a = make_out(tmp_path / "a", screen, rows, best={"config": {"batch_size": 32}, "tokens_per_s": 950.0})
    b = make_out(tmp_path / "b", screen, rows, best={"config": {"batch_size": 32}, "tokens_per_s": 990.0})
    proc = diff(a, b)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(marked(proc.stdout, "same")) == 3 + 2 + 1 + 3  # proposals, loss runs, gate, equal figures
    assert marked(proc.stdout, "DIFF") == []
    assert any(line.startswith("speed answer: batch_size=32 at 950") for line in marked(proc.stdout, "speed"))
    assert "speed-independent decisions: the same" in proc.stdout


@pytest.mark.parametrize("moved", ["val_loss", "train_loss"])
def test_a_loss_that_moved_in_its_last_decimal_is_a_difference(tmp_path, moved):
    a = make_out(tmp_path / "a", SCREEN, [BASELINE, contender(2.04, True)])
    b = make_out(tmp_path / "b", SCREEN, [BASELINE, {**contender(2.04, True), moved: 2.04001}])
    proc = diff(a, b)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (line,) = marked(proc.stdout, "DIFF")
    assert line.startswith("DIFF  batch_size=32: val 2.04 pass") and "2.04001" in line


def test_another_proposal_after_the_same_results_is_a_difference(tmp_path):
    a = make_out(tmp_path / "a", [*SCREEN, (PROPOSED_THIRD, 800.0)], [BASELINE])
    b = make_out(tmp_path / "b", [*SCREEN, ({"batch_size": 8, "precision": "fp32"}, 800.0)], [BASELINE])
    proc = diff(a, b)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (line,) = marked(proc.stdout, "DIFF")
    assert line.startswith("DIFF  #2: batch_size=32, precision=bf16") and "batch_size=8" in line


def test_what_follows_other_measured_speeds_is_speed_dependent(tmp_path):
    # The same two first configs timed in the other order: TPE's third proposal may differ, and which
    # contender the loss check trains follows the speeds too; neither is judged.
    slow_first = [(SCREEN[0][0], 950.0), (SCREEN[1][0], 900.0)]
    a = make_out(tmp_path / "a", [*SCREEN, (PROPOSED_THIRD, 800.0)], [BASELINE, contender(2.04, True)])
    b = make_out(tmp_path / "b", [*slow_first, ({"batch_size": 8, "precision": "fp32"}, 800.0)], [BASELINE])
    proc = diff(a, b)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    speed = marked(proc.stdout, "speed")
    assert any(line.startswith("speed #2:") and "TPE had seen other results" in line for line in speed)
    assert any(line.startswith("speed batch_size=32:") and "(not trained)" in line for line in speed)
    assert marked(proc.stdout, "DIFF") == []


def set_gate(out: Path, **fields) -> None:
    summary = json.loads((out / "summary.json").read_text())
    summary["loss_gate"].update(fields)
    (out / "summary.json").write_text(json.dumps(summary))


def test_the_gate_is_judged_where_both_baselines_trained_alike(tmp_path):
    borrowed = {**BASELINE, "execution": {"fused_adamw": True}, "val_loss": 2.0124}
    a = make_out(tmp_path / "a", SCREEN, [BASELINE])
    b = make_out(tmp_path / "b", SCREEN, [borrowed])  # its twin lent the fused optimizer: a speed choice
    set_gate(b, baseline_loss=2.0124, limit=2.0624)
    proc = diff(a, b)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert any("other borrowed knobs" in line for line in marked(proc.stdout, "speed"))

    c = make_out(tmp_path / "c", SCREEN, [BASELINE])
    set_gate(c, limit=2.0723)  # the same baseline run, another limit
    proc = diff(a, c)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (line,) = marked(proc.stdout, "DIFF")
    assert "'limit': 2.0623" in line and "'limit': 2.0723" in line


def test_an_out_without_a_finished_search_is_one_line_and_exit_2(tmp_path):
    a = make_out(tmp_path / "a", SCREEN, [BASELINE])
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = diff(a, empty)
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        == f"decisions_diff: {empty / 'summary.json'}: no such file (not a finished search's OUT)"
    )
    (empty / "summary.json").write_text("{}")
    proc = diff(a, empty)
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        == f"decisions_diff: {empty / 'optuna.journal'}: no such file (the screen's study)"
    )
    assert diff(a, a).returncode == 0
