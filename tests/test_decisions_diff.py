"""bench/decisions_diff.py on two hand-made OUT dirs: a real Optuna journal of a seeded TPE study (as the
screen's searcher leaves it), its state.json and a summary.json each; run as a user runs it (a
subprocess) in the first test, and through the same `main` in this process in the others (a subprocess's
imports of Optuna were most of each test), judged by its exit code and the lines it marks."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import subprocess
import sys
from pathlib import Path

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

from tests.test_searcher import FailsFrom
from tuner.space.sampler import open_study
from tuner.space.searcher import ScreenSearcher

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "decisions_diff.py"
SPACE = {
    "batch_size": CategoricalDistribution([8, 16, 32, 64]),
    "precision": CategoricalDistribution(["fp32", "bf16"]),
    "loader": CategoricalDistribution(["dataloader", "device"]),
}
TRIALS = 8  # the config's search.trials: 2 startup trials (tuner/phases/screen.py)
SPEEDS = [700.0, 900.0, 800.0, 650.0]  # what each screen trial measured, in the order they ran
BASELINE = {
    "id": "baseline",
    "phase": "baseline",  # as summary.json lists the baseline's loss run
    "config": {},
    "status": "ok",
    "val_loss": 2.0123,
    "train_loss": 1.9,
}
CONTENDER = {"id": "loss_check_0-0", "phase": "loss_check_0", "config": {"batch_size": 32}, "status": "ok"}


def make_out(path: Path, speeds, loss_rows, best=None, seed: int = 0) -> Path:
    """An OUT as a search leaves it: the screen's seeded TPE asked for a config and told its speed, one trial
    after another, in optuna.journal; the seed in state.json; the rows and the loss limit in summary.json."""
    path.mkdir()
    study = optuna.create_study(
        study_name="screen",
        direction="maximize",
        storage=JournalStorage(JournalFileBackend(str(path / "optuna.journal"))),
        sampler=optuna.samplers.TPESampler(seed=seed, n_startup_trials=2),
    )
    screen_rows = []
    for n, speed in enumerate(speeds):
        trial = study.ask(fixed_distributions=SPACE)
        study.tell(trial, speed)
        screen_rows.append(
            {"id": f"screen-{n}", "phase": "screen", "config": trial.params, "tokens_per_s": speed}
        )
    (path / "state.json").write_text(json.dumps({"config": {"search": {"seed": 0, "trials": TRIALS}}}))
    summary = {
        "trials": screen_rows + loss_rows,
        "loss_limit": {"baseline_loss": 2.0123, "tolerance": 0.05, "mode": "absolute", "limit": 2.0623},
        "baseline": {"tokens_per_s": 600.0},
        "best": best,
    }
    (path / "summary.json").write_text(json.dumps(summary))
    return path


def diff_as_a_user_runs_it(a: Path, b: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(a), str(b)], capture_output=True, text=True, timeout=120
    )


def load_script():
    spec = importlib.util.spec_from_file_location("decisions_diff", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


SCRIPT_MAIN = load_script().main


def diff(a: Path, b: Path) -> subprocess.CompletedProcess:
    """The script's `main` in this process, its exit code and what it printed, as the subprocess gives them."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = SCRIPT_MAIN([str(a), str(b)])
    return subprocess.CompletedProcess([str(SCRIPT), str(a), str(b)], code, out.getvalue(), err.getvalue())


def marked(stdout: str, mark: str) -> list[str]:
    return [line.strip() for line in stdout.splitlines() if line.strip().startswith(mark + " ")]


def contender(val_loss: float, feasible: bool) -> dict:
    return {**CONTENDER, "val_loss": val_loss, "train_loss": 2.01, "feasible": feasible}


def set_loss_limit(out: Path, **fields) -> None:
    summary = json.loads((out / "summary.json").read_text())
    summary["loss_limit"].update(fields)
    (out / "summary.json").write_text(json.dumps(summary))


def as_before_the_rename(out: Path) -> Path:
    """The OUT as searches wrote it before the loss limit had its name: summary.json's `loss_gate`."""
    summary = json.loads((out / "summary.json").read_text())
    summary["loss_gate"] = summary.pop("loss_limit")
    (out / "summary.json").write_text(json.dumps(summary))
    return out


def test_the_same_decisions_exit_0_however_the_winner_was_timed(tmp_path):
    rows = [BASELINE, contender(2.04, True)]
    a = make_out(tmp_path / "a", SPEEDS, rows, best={"config": {"batch_size": 32}, "tokens_per_s": 950.0})
    b = make_out(tmp_path / "b", SPEEDS, rows, best={"config": {"batch_size": 32}, "tokens_per_s": 990.0})
    proc = diff_as_a_user_runs_it(a, b)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    same = marked(proc.stdout, "same")
    assert len(same) == 4 + 2 + 2 + 1 + 3  # proposals, replays, loss runs, loss limit, equal figures
    assert "same  A: TPE (seed 0, 2 startup trials) fed A's own results proposes 4 of 4" in same
    assert marked(proc.stdout, "DIFF") == []
    assert "speed answer: batch_size=32 at 950 tok/s  |  batch_size=32 at 990 tok/s" in marked(
        proc.stdout, "speed"
    )
    assert "speed-independent decisions: the same" in proc.stdout


def test_a_val_loss_that_moved_in_its_last_decimal_is_a_difference(tmp_path):
    a = make_out(tmp_path / "a", SPEEDS, [BASELINE, contender(2.04, True)])
    b = make_out(tmp_path / "b", SPEEDS, [BASELINE, {**contender(2.04, True), "val_loss": 2.04001}])
    proc = diff(a, b)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (line,) = marked(proc.stdout, "DIFF")
    assert line.startswith("DIFF  batch_size=32: val 2.04 pass") and "2.04001" in line


def test_a_train_loss_alone_that_moved_is_the_progress_lines_timing_not_a_difference(tmp_path):
    # the final train loss is the mean since the last progress line, which a slow run prints by time too
    a = make_out(tmp_path / "a", SPEEDS, [BASELINE, contender(2.04, True)])
    b = make_out(tmp_path / "b", SPEEDS, [BASELINE, {**contender(2.04, True), "train_loss": 2.04001}])
    proc = diff(a, b)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert marked(proc.stdout, "DIFF") == []
    assert any("2.04001" in line and "progress line" in line for line in marked(proc.stdout, "speed"))


def test_a_searcher_seeded_otherwise_is_a_difference(tmp_path):
    # B's TPE drew from another seed than its config says: a proposal made after the same results as A's
    # differs, and the seeded TPE replayed on B's own results does not propose what B did.
    a = make_out(tmp_path / "a", SPEEDS, [BASELINE])
    b = make_out(tmp_path / "b", SPEEDS, [BASELINE], seed=3)
    proc = diff(a, b)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    diffs = marked(proc.stdout, "DIFF")
    assert diffs[0].startswith("DIFF  #") and "TPE had seen" not in diffs[0]
    assert any(
        line.startswith("DIFF  B: TPE (seed 0, 2 startup trials)") and "; not #" in line for line in diffs
    )
    assert not any(line.startswith("DIFF  A:") for line in diffs)


def test_what_follows_other_measured_speeds_is_speed_dependent(tmp_path):
    # The first two configs timed in the other order: what TPE proposes next may differ, and which
    # contender the loss check trains follows the speeds too; neither is judged, the replays still are.
    flipped = [900.0, 700.0, 800.0, 650.0]
    a = make_out(tmp_path / "a", SPEEDS, [BASELINE, contender(2.04, True)])
    b = make_out(tmp_path / "b", flipped, [BASELINE])
    proc = diff(a, b)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [line[:7] for line in marked(proc.stdout, "same")][:2] == ["same  #"] * 2
    lines = proc.stdout.splitlines()
    third = next(line.strip() for line in lines if "#2: " in line)
    assert third.endswith("(TPE had seen other results or loss verdicts)") and not third.startswith("DIFF")
    assert any(
        line.startswith("speed batch_size=32:") and "(not trained)" in line
        for line in marked(proc.stdout, "speed")
    )
    assert "same  B: TPE (seed 0, 2 startup trials) fed B's own results proposes 4 of 4" in marked(
        proc.stdout, "same"
    )
    assert marked(proc.stdout, "DIFF") == []


def test_the_loss_limit_is_judged_where_both_baselines_trained_alike(tmp_path):
    borrowed = {**BASELINE, "execution": {"fused_adamw": True}, "val_loss": 2.0124}
    a = make_out(tmp_path / "a", SPEEDS, [BASELINE])
    b = make_out(tmp_path / "b", SPEEDS, [borrowed])  # its twin lent the fused optimizer: a speed choice
    set_loss_limit(b, baseline_loss=2.0124, limit=2.0624)
    proc = diff(a, b)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert any("other borrowed knobs" in line for line in marked(proc.stdout, "speed"))

    c = make_out(tmp_path / "c", SPEEDS, [BASELINE])
    set_loss_limit(c, limit=2.0723)  # the same baseline run, another limit
    proc = diff(a, c)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (line,) = marked(proc.stdout, "DIFF")
    assert "'limit': 2.0623" in line and "'limit': 2.0723" in line


def test_an_out_from_before_the_loss_limit_had_its_name_is_compared_by_its_loss_gate(tmp_path):
    old = as_before_the_rename(make_out(tmp_path / "old", SPEEDS, [BASELINE]))
    new = make_out(tmp_path / "new", SPEEDS, [BASELINE])
    proc = diff(old, new)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    section = proc.stdout.split("loss limit:\n")[1].splitlines()[0].strip()
    assert section.startswith("same ") and section.count("'limit': 2.0623") == 2


def test_an_out_without_a_finished_search_is_one_line_and_exit_2(tmp_path):
    a = make_out(tmp_path / "a", SPEEDS, [BASELINE])
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


def make_loss_aware_out(path: Path, speeds, fails_from: int | None, seed: int = 0) -> Path:
    """An OUT whose screen the loss-aware TPE drew (tuner/space/sampler.py: the study keeps its seed, startup
    trials and start points, and each proposal what it was drawn from), two running at a time; from the
    third proposal on the loss runs say batches of `fails_from` and up fail the limit."""
    knobs = {name: list(dist.choices) for name, dist in SPACE.items()}
    said: dict = {"now": None}
    path.mkdir()
    storage = JournalStorage(JournalFileBackend(str(path / "optuna.journal")))
    sampler = open_study(
        "screen",
        storage,
        seed,
        2,
        knobs,
        [{"batch_size": 8, "precision": "fp32", "loader": "dataloader"}],
        lambda: said["now"],
    )
    searcher = ScreenSearcher(sampler)
    running = []
    for n, speed in enumerate(speeds):
        if n == 2 and fails_from is not None:
            said["now"] = FailsFrom(fails_from)
        searcher.suggest(f"t{n}")
        running.append((f"t{n}", speed))
        if len(running) == 2:
            tid, value = running.pop(0)
            searcher.on_trial_complete(tid, result={"tokens_per_s": value})
    for tid, value in running:
        searcher.on_trial_complete(tid, result={"tokens_per_s": value})
    (path / "state.json").write_text(json.dumps({"config": {"search": {"seed": seed, "trials": TRIALS}}}))
    summary = {
        "trials": [BASELINE],
        "loss_limit": {"baseline_loss": 2.0123, "tolerance": 0.05, "mode": "absolute", "limit": 2.0623},
        "baseline": {"tokens_per_s": 600.0},
        "best": None,
    }
    (path / "summary.json").write_text(json.dumps(summary))
    return path


def test_a_loss_aware_screen_replays_by_its_own_rule_with_the_constraints_it_saw(tmp_path):
    """Each proposal of a loss-aware screen draws again from what it was drawn from, the verdicts it was
    told included; a screen that was told other verdicts proposes otherwise, and its own replay still holds."""
    speeds = [700.0, 900.0, 800.0, 650.0, 720.0, 880.0]
    a = make_loss_aware_out(tmp_path / "a", speeds, fails_from=32)
    b = make_loss_aware_out(tmp_path / "b", speeds, fails_from=32)
    same = diff(a, b)
    assert same.returncode == 0, same.stdout
    assert "same  A: loss-aware TPE (seed 0, 2 startup trials) fed A's own results proposes 6 of 6" in marked(
        same.stdout, "same"
    )
    told_otherwise = make_loss_aware_out(tmp_path / "c", speeds, fails_from=None)
    other = diff(a, told_otherwise)
    assert other.returncode == 0, "other verdicts, other proposals: no rule changed"
    assert (
        "batch_size=32, loader=device, precision=fp32 [refused, 0 tok/s]  |  batch_size=32, loader=device, "
        in (other.stdout)
    )
    assert any(
        line.endswith("(TPE had seen other results or loss verdicts)")
        for line in marked(other.stdout, "speed")
    )
    assert "same  B: loss-aware TPE (seed 0, 2 startup trials) fed B's own results proposes 6 of 6" in marked(
        other.stdout, "same"
    )
