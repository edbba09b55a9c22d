"""Remembered answers (tuner/answers.py): what makes two searches the same, and, end to end, a second search
that confirms the first one's answer by re-measuring only its finalists and the baseline."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainables.config import read_yaml
from trainables.exit_codes import Exit
from tuner import answers
from tuner.config import CONFIRM_RUNS, SearchSection, load_search_config
from tuner.records import Hardware

ROOT = Path(__file__).resolve().parents[1]
SMOKE = str(ROOT / "configs" / "smoke.yaml")
H200 = Hardware(node="gpu-1", cpus=16, cuda=True, torch="2.11.0", gpus=1, gpu_name="NVIDIA H200")


def test_the_fingerprint_is_stable_and_moves_with_config_hardware_and_code(tmp_path):
    cfg = load_search_config(SMOKE, [])
    key = answers.fingerprint(cfg, H200, None)
    assert key == answers.fingerprint(load_search_config(SMOKE, []), H200, None)
    assert key != answers.fingerprint(load_search_config(SMOKE, ["train.batch_size=32"]), H200, None)
    assert key != answers.fingerprint(load_search_config(SMOKE, ["search.trials=9"]), H200, None)
    assert key != answers.fingerprint(cfg, H200.model_copy(update={"gpu_name": "NVIDIA H100"}), None)
    assert key != answers.fingerprint(cfg, H200.model_copy(update={"torch": "2.13.0"}), None)
    (tmp_path / "job.py").write_text("def make_workload(cfg): ...\n")
    with_code = answers.fingerprint(cfg, H200, str(tmp_path))
    (tmp_path / "job.py").write_text("def make_workload(cfg): return None\n")
    assert with_code not in (key, answers.fingerprint(cfg, H200, str(tmp_path)))


# Fingerprints of the shipped configs (code digest held fixed): the typed TrainConfig dumps the keys the user
# set, so a search remembered before finds its answer after. Pinned again when search.recipe came (issue 43):
# an answer remembered from before has no screen run of the recipe, so it is not this search's.
PINNED = {
    "default": "0c8726ea91d7c3995d1b0091",
    "smoke": "2ffeed62c87115ab9bc0d30a",
    "hybrid-100m": "55f3dd0f03f9d2d1e9626d45",
}


@pytest.mark.parametrize("name", PINNED)
def test_the_shipped_configs_fingerprints_are_the_ones_searches_remembered(monkeypatch, name):
    monkeypatch.setattr(answers, "code_digest", lambda roots: "code")
    cfg = load_search_config(str(ROOT / "configs" / f"{name}.yaml"), [], data="/data/corpus.txt")
    cfg = cfg.with_train(data_sha256="ab" * 32)  # as claim_out pins the corpus
    assert answers.fingerprint(cfg, H200, None) == PINNED[name]


def test_the_fingerprint_reads_the_keys_set_not_the_defaults(monkeypatch):
    monkeypatch.setattr(answers, "code_digest", lambda roots: "code")
    cfg = load_search_config(SMOKE, [])
    key = answers.fingerprint(cfg, H200, None)
    assert key == "aa3bd14c46d41001c82a972d", "pinned with search.recipe"
    assert cfg.model_dump(mode="json")["train"] == read_yaml(SMOKE)["train"]  # hashed: the keys set
    assert answers.fingerprint(cfg.with_train(seed=7), H200, None) != key
    assert answers.fingerprint(cfg.with_train(grad_accum=1), H200, None) != key  # its default, but set
    # a value is hashed as it is read: YAML's 1e-3 (a string to YAML) is the search 0.001 is
    lr = [
        answers.fingerprint(load_search_config(SMOKE, [f"train.lr={v}"]), H200, None)
        for v in ("1e-3", "0.001")
    ]
    assert lr[0] == lr[1] == "898a7fa04eeb04828f07e39b"


def test_a_record_round_trips_and_a_damaged_one_is_no_answer(tmp_path):
    phases = {"probe": {}, "screen": [{"id": "screen-0"}], "loss_check": [], "remeasure": ["not kept"]}
    path = answers.remember(tmp_path, "k", tmp_path / "out", phases)
    record = answers.recall(tmp_path, "k")
    assert record["phases"] == {"probe": {}, "screen": [{"id": "screen-0"}], "loss_check": []}
    assert record["out"] == str((tmp_path / "out").resolve())
    path.write_text('{"phases": {"probe": {}')  # cut short
    assert answers.recall(tmp_path, "k") is None
    assert answers.recall(tmp_path, "other") is None


def test_fresh_is_asked_by_flag_or_environment(monkeypatch):
    monkeypatch.setenv("TUNER_FRESH", "0")
    assert not answers.fresh_asked(False) and answers.fresh_asked(True)
    monkeypatch.setenv("TUNER_FRESH", "1")
    assert answers.fresh_asked(False)


@pytest.mark.slow
def test_a_second_search_confirms_the_first_answer_and_fresh_searches_anew(tmp_path):
    from tests.test_search import DATA, ENV, SHORT_LOSS_RUNS

    env = {**ENV, "TUNER_FRESH": "0", "TUNER_CACHE_DIR": str(tmp_path / "cache")}
    tiny = ["--config", SMOKE, *SHORT_LOSS_RUNS, "--trials", "2", "--set", "search.repeats=1"]
    tiny += ["--data", DATA[0]] if DATA else []
    finished = (Exit.OK, Exit.NO_FEASIBLE, Exit.UNTRUSTED)

    def search(out: Path, *more: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "tuner.search", "--out", str(out), *tiny, *more]
        return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)

    first = search(tmp_path / "first")
    assert first.returncode in finished, first.stderr[-3000:]
    assert "remembered" not in first.stderr

    second = search(tmp_path / "second")
    assert second.returncode in finished, second.stderr[-3000:]
    assert "remembered: this search matches one finished" in second.stderr, second.stderr[-3000:]
    assert "[screen] starting" not in second.stderr  # taken, not run
    summary = json.loads((tmp_path / "second" / "summary.json").read_text())
    assert summary["remembered"]["out"] == str((tmp_path / "first").resolve())
    assert {p.name for p in (tmp_path / "second" / "trials").iterdir()} == {"remeasure.jsonl"}
    assert "A confirmation" in (tmp_path / "second" / "report.md").read_text()

    fresh = search(tmp_path / "fresh", "--fresh")
    assert fresh.returncode in finished, fresh.stderr[-3000:]
    assert "[screen] starting" in fresh.stderr and "remembered" not in fresh.stderr


def test_a_confirmation_re_measures_fewer_runs_than_a_fresh_search():
    """The default search's 6 baseline runs and 3 of each finalist were 102-116 s of a 121-132 s confirmation
    on one H200 (runs V, X): a confirmation times at most 3 and 2, never more than the search asked."""
    default = load_search_config(str(ROOT / "configs" / "default.yaml")).search
    assert default.remeasure_runs(confirming=False) == (6, 3)
    assert default.remeasure_runs(confirming=True) == CONFIRM_RUNS == (3, 2)
    few = SearchSection(repeats=1, baseline_repeats=2)
    assert few.remeasure_runs(confirming=True) == few.remeasure_runs(confirming=False) == (2, 1)
