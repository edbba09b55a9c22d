"""OUT's journal and ledgers after damage: a record cut short at the end is dropped on --resume (one line,
nothing before it lost, the next record not glued to it); damage before the last record is refused in one
line naming the file, with nothing changed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from trainables.config import ConfigError
from tuner import search
from tuner.phases.screen import _fail_stale_trials
from tuner.runs.ledger import Ledger
from tuner.state.search_state import State
from tuner.state.state_files import repair_state_files

ROOT = Path(__file__).resolve().parents[1]
SMOKE = str(ROOT / "configs" / "smoke.yaml")
SHAKESPEARE = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"


def ledger_of(out: Path, n: int) -> Ledger:
    ledger = Ledger(out, "screen")
    for i in range(n):
        ledger.append({"status": "ok", "tokens_per_s": 1000.0 + i, "config": {"batch_size": 8 * (i + 1)}})
    return ledger


def journal_of(out: Path, n: int) -> Path:
    path = out / "optuna.journal"
    study = optuna.create_study(study_name="screen", storage=JournalStorage(JournalFileBackend(str(path))))
    for i in range(n):
        study.enqueue_trial({"x": i})
        study.optimize(lambda t: t.suggest_int("x", 0, 100), n_trials=1)
    return path


def cut(path: Path, nbytes: int) -> None:
    os.truncate(path, path.stat().st_size - nbytes)


def test_a_ledger_cut_short_loses_only_its_last_record_and_the_next_row_is_kept(tmp_path):
    ledger = ledger_of(tmp_path, 4)
    cut(ledger.path, 200)  # inside the last row, as `truncate -s -200` did
    said: list[str] = []
    repair_state_files(tmp_path, said.append)
    assert len(said) == 1 and "screen.jsonl: dropped its last record" in said[0] and "3 before it" in said[0]
    assert [r.tokens_per_s for r in ledger.rows()] == [1000.0, 1001.0, 1002.0]
    ledger.append({"status": "ok", "tokens_per_s": 14768.0})
    assert [r.tokens_per_s for r in ledger.rows()] == [1000.0, 1001.0, 1002.0, 14768.0]


def test_a_row_appended_onto_a_cut_line_is_not_glued_to_it(tmp_path):
    ledger = ledger_of(tmp_path, 2)
    cut(ledger.path, 50)  # no repair: the driver appends as a crash left the file
    ledger.append({"status": "ok", "tokens_per_s": 14768.0})
    assert [r.tokens_per_s for r in ledger.rows()] == [1000.0, 14768.0]


def test_a_journal_cut_short_is_repaired_and_the_study_loads_with_its_finished_trials(tmp_path):
    path = journal_of(tmp_path, 3)
    cut(path, 60)  # as `truncate -s -60 OUT/optuna.journal` did
    unrepaired = tmp_path / "unrepaired.journal"
    unrepaired.write_bytes(path.read_bytes())
    with pytest.raises((ValueError, AttributeError)):  # before: appended onto the cut line, then unreadable
        study = optuna.load_study(
            study_name="screen", storage=JournalStorage(JournalFileBackend(str(unrepaired)))
        )
        study.optimize(lambda t: t.suggest_int("x", 0, 100), n_trials=1)
        optuna.load_study(study_name="screen", storage=JournalStorage(JournalFileBackend(str(unrepaired))))
    said: list[str] = []
    repair_state_files(tmp_path, said.append)
    assert len(said) == 1 and "optuna.journal: dropped its last record" in said[0]
    study = optuna.load_study(study_name="screen", storage=JournalStorage(JournalFileBackend(str(path))))
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) >= 2 and len(study.trials) == 3  # only the last trial's last operation was lost
    study.optimize(lambda t: t.suggest_int("x", 0, 100), n_trials=1)  # and it takes new records


def test_damage_before_the_last_record_is_refused_naming_the_file_and_changing_nothing(tmp_path):
    ledger = ledger_of(tmp_path, 3)
    lines = ledger.path.read_bytes().splitlines(keepends=True)
    damaged = lines[0] + b'{"id": "scr\n' + lines[2]
    ledger.path.write_bytes(damaged)
    with pytest.raises(ConfigError, match=r"screen.jsonl line 2 of 3 is corrupt"):
        repair_state_files(tmp_path, print)
    assert ledger.path.read_bytes() == damaged


def test_resume_repairs_before_ray_starts(tmp_path, monkeypatch, capsys):
    """Through the CLI: the repair line, then Ray (stopped here: the rest is the ordinary resume)."""
    out = tmp_path / "out"
    data = ["--data", str(SHAKESPEARE)] if SHAKESPEARE.exists() else []
    argv = ["--config", SMOKE, "--out", str(out), *data]
    cfg, *_ = search.read_config(search.build_parser().parse_args(argv), out)
    out.mkdir()  # read_config checks, and writes nothing
    state = State(out)  # what a first run leaves: its config, in state.json
    state.data["config"] = cfg.model_dump()
    state.save()
    ledger = ledger_of(out, 3)
    cut(ledger.path, 100)
    cut(journal_of(out, 2), 30)

    def stop(*args, **kwargs):
        raise KeyboardInterrupt("stopped here")

    monkeypatch.setattr("tuner.session.ray_session.connect", stop)
    assert search.main([*argv, "--resume"]) == 130
    err = capsys.readouterr().err
    assert "screen.jsonl: dropped its last record" in err and "optuna.journal: dropped its last record" in err
    assert len(ledger.rows()) == 2


KILLED_DRIVER = """
import os, signal, sys
import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
study = optuna.create_study(study_name="screen", storage=JournalStorage(JournalFileBackend(sys.argv[1])))
study.optimize(lambda t: t.suggest_int("x", 0, 100), n_trials=1)
study.ask().suggest_int("x", 0, 100)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_trial_a_killed_driver_left_running_is_failed_on_resume_and_finished_ones_kept(tmp_path):
    path = tmp_path / "optuna.journal"
    driver = subprocess.run(
        [sys.executable, "-c", KILLED_DRIVER, str(path)], capture_output=True, check=False
    )
    assert driver.returncode == -signal.SIGKILL
    storage = JournalStorage(JournalFileBackend(str(path)))
    before = optuna.load_study(study_name="screen", storage=storage).trials
    assert [t.state for t in before] == [TrialState.COMPLETE, TrialState.RUNNING]

    _fail_stale_trials(storage)

    reread = JournalStorage(JournalFileBackend(str(path)))  # what the next resume reads from the file
    after = optuna.load_study(study_name="screen", storage=reread).trials
    assert [t.state for t in after] == [TrialState.COMPLETE, TrialState.FAIL]
    assert after[0].value == before[0].value


def test_failing_stale_trials_before_any_study_exists_is_a_no_op(tmp_path):
    path = tmp_path / "optuna.journal"
    _fail_stale_trials(JournalStorage(JournalFileBackend(str(path))))
    assert optuna.get_all_study_names(JournalStorage(JournalFileBackend(str(path)))) == []
