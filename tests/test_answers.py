"""Remembered answers (tuner/state/answers.py): what makes two searches the same, and how the pipeline takes one. End
to end, a second search confirming the first one's answer is in tests/test_stray_cluster.py (its two searches
beside a live and a dead stray cluster share their settings)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from trainables.config import read_yaml
from tuner.config import CONFIRM_RUNS, SearchSection, load_search_config
from tuner.phases import finish
from tuner.state import answers
from tuner.state.hardware import Hardware
from tuner.state.records import TrialRow

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
# an answer remembered from before has no screen run of the recipe, so it is not this search's; and for
# default when its recipe came to compile block by block (aa1ad86): its screen ran another recipe; and for
# hybrid-100m when the fused kernels became a start point (its screen never timed them) and
# max-autotune-no-cudagraphs left its space.
PINNED = {
    "default": "d57edf6fed183cbd35e5c6a5",
    "smoke": "2ffeed62c87115ab9bc0d30a",
    "hybrid-100m": "2f9284198ac44222dc2d1c9f",
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


def _row(n: int, **more) -> dict:
    return TrialRow(id=f"screen-{n}", phase="screen", tokens_per_s=1000.0 + n, **more).model_dump(mode="json")


def _finished(out: Path, key: str, screen: list[dict], untrusted: bool = False) -> dict:
    """An earlier search's OUT as a finished search leaves it: its phases in state.json, its ledgers, its
    summary.json."""
    phases = {"probe": {}, "screen": screen, "loss_check": {"candidates": []}, "remeasure": ["not kept"]}
    (out / "trials").mkdir(parents=True)
    (out / "trials" / "screen.jsonl").write_text("".join(json.dumps(r) + "\n" for r in screen))
    (out / "optuna.journal").write_text('{"op_code": 0}\n')
    (out / "state.json").write_text(json.dumps({"fingerprint": key, "phases": phases}, indent=1))
    (out / "summary.json").write_text(json.dumps({"untrusted": untrusted}))
    return phases


def test_a_record_round_trips_and_a_damaged_one_is_no_answer(tmp_path):
    phases = _finished(tmp_path / "out", "k", [_row(0)])
    path = answers.remember(tmp_path, "k", tmp_path / "out", phases)
    record = answers.recall(tmp_path, "k")
    assert record["phases"] == {"probe": {}, "screen": [_row(0)], "loss_check": {"candidates": []}}
    assert record["out"] == str((tmp_path / "out").resolve())
    path.write_text('{"phases": {"probe": {}')  # cut short
    assert answers.recall(tmp_path, "k") is None
    assert answers.recall(tmp_path, "other") is None


def test_an_untrusted_search_is_not_remembered(tmp_path):
    """A confirmation would present its figures without the notices that said they were untrusted."""
    phases = _finished(tmp_path / "out", "k", [_row(0), _row(1)])
    assert answers.remember(tmp_path / "kept", "k", tmp_path / "out", phases, untrusted=True) is None
    contended = _finished(tmp_path / "busy", "k", [_row(0), _row(1, cpu_shared=True)])
    assert answers.remember(tmp_path / "kept", "k", tmp_path / "busy", contended) is None
    assert not (tmp_path / "kept").exists()
    assert "1 of its 2 screen figures were timed while" in answers.untrusted_why(contended, False)
    assert answers.remember(tmp_path / "kept", "k", tmp_path / "out", phases) is not None  # trusted: kept
    # a GPU shared with the search's own loss runs beside the screen (by design) is no reason
    beside = _finished(tmp_path / "gpu", "k2", [_row(0, shared=True), _row(1, shared=True)])
    assert answers.remember(tmp_path / "kept", "k2", tmp_path / "gpu", beside) is not None


def test_recall_refuses_a_record_that_says_its_figures_were_untrusted(tmp_path):
    heard: list[str] = []
    phases = _finished(tmp_path / "out", "k", [_row(0)])
    answers.remember(tmp_path, "k", tmp_path / "out", phases)
    record = json.loads((tmp_path / "k.json").read_text())
    (tmp_path / "k.json").write_text(json.dumps({**record, "untrusted": True}))
    assert answers.recall(tmp_path, "k", heard.append) is None
    # an older record, written before untrusted searches were skipped: its contended screen rows say so
    older = {**record, "phases": {**record["phases"], "screen": [_row(0, cpu_shared=True)]}}
    (tmp_path / "k.json").write_text(json.dumps(older))
    assert answers.recall(tmp_path, "k", heard.append) is None
    # its OUT's summary.json says so
    (tmp_path / "k.json").write_text(json.dumps(record))
    (tmp_path / "out" / "summary.json").write_text(json.dumps({"untrusted": True}))
    assert answers.recall(tmp_path, "k", heard.append) is None
    assert len(heard) == 3 and all("untrusted" in h and "searching anew" in h for h in heard), heard


@pytest.mark.parametrize(
    "damage, why",
    [
        (lambda out: shutil.rmtree(out), "is gone"),
        (lambda out: (out / "summary.json").unlink(), "summary.json is gone"),
        (lambda out: (out / "state.json").write_text('{"phases": {'), "does not read"),
        (lambda out: (out / "state.json").write_text('{"fingerprint": "other"}'), "no longer holds"),
        (lambda out: shutil.rmtree(out / "trials"), "no longer"),
        (lambda out: (out / "trials" / "screen.jsonl").write_text('{"id": "screen-0"}\n{"id": "scr'), "cut"),
        (lambda out: (out / "optuna.journal").write_text('{"op_code": 0}\n{"op_'), "damaged"),
    ],
)
def test_recall_refuses_an_answer_whose_evidence_is_gone_or_damaged(tmp_path, damage, why):
    out = tmp_path / "out"
    answers.remember(tmp_path, "k", out, _finished(out, "k", [_row(0), _row(1)]))
    assert answers.recall(tmp_path, "k") is not None  # whole: used
    damage(out)
    heard: list[str] = []
    assert answers.recall(tmp_path, "k", heard.append) is None
    assert len(heard) == 1 and why in heard[0] and str(out) in heard[0], heard


def test_the_same_out_rerun_after_rm_does_not_recall_itself(tmp_path):
    """The command run again into its own OUT after rm -rf: the new search's state.json is there, the
    earlier search's evidence is not."""
    out = tmp_path / "out"
    answers.remember(tmp_path, "k", out, _finished(out, "k", [_row(0)]))
    shutil.rmtree(out)
    out.mkdir()
    (out / "state.json").write_text(json.dumps({"fingerprint": "k", "phases": {"hardware": {}}}))
    assert answers.recall(tmp_path, "k") is None


def test_summary_rows_never_name_a_trial_folder_that_is_not_there(tmp_path):
    """A remembered search's rows point at the earlier OUT's folders where they exist, else at none."""
    (tmp_path / "earlier" / "ray" / "screen" / "t0").mkdir(parents=True)
    rows = [
        TrialRow(id="screen-0", phase="screen", path=str(tmp_path / "earlier" / "ray" / "screen" / "t0")),
        TrialRow(id="screen-1", phase="screen", path=str(tmp_path / "gone" / "ray" / "screen" / "t1")),
        TrialRow(id="remeasure-0", phase="remeasure"),
    ]
    kept = finish._without_timelines(rows)
    assert [r.path for r in kept] == [rows[0].path, None, None]


def test_fresh_is_asked_by_flag_or_environment(monkeypatch):
    monkeypatch.setenv("TUNER_FRESH", "0")
    assert not answers.fresh_asked(False) and answers.fresh_asked(True)
    monkeypatch.setenv("TUNER_FRESH", "1")
    assert answers.fresh_asked(False)


def test_fresh_takes_no_remembered_answer_where_one_would_be_taken(tmp_path, monkeypatch):
    """The pipeline's choice (the real records: the tests above; the searches end to end: tests/test_stray_cluster.py)."""
    from tuner import pipeline
    from tuner.context import SearchContext
    from tuner.state.search_state import State

    monkeypatch.setenv("TUNER_FRESH", "0")
    cfg = load_search_config(SMOKE)
    out = tmp_path / "out"
    out.mkdir()
    asked: list[str] = []
    record = {"out": str(tmp_path / "first"), "when": "2026-11-29 12:00"}
    record["phases"] = {name: [] for name in answers.REMEMBERED_PHASES}
    monkeypatch.setattr(answers, "recall", lambda folder, key, say: asked.append(key) or record)

    fresh = SearchContext(
        cfg=cfg, out=out, base=cfg.train, hw=Hardware(), cluster_cpus=1, state=State(out), command=""
    )
    assert pipeline.recall_answer(fresh, fresh=True, kept=tmp_path / "answers") is False
    assert not asked and "remembered" not in fresh.state.data
    again = SearchContext(
        cfg=cfg, out=out, base=cfg.train, hw=Hardware(), cluster_cpus=1, state=State(out), command=""
    )
    assert pipeline.recall_answer(again, fresh=False, kept=tmp_path / "answers") is True
    assert (
        asked == [again.state.data["fingerprint"]] and again.state.data["remembered"]["out"] == record["out"]
    )


def test_a_confirmation_re_measures_fewer_runs_than_a_fresh_search():
    """The default search's 6 baseline runs and 3 of each finalist were 102-116 s of a 121-132 s confirmation
    on one H200 (runs V, X): a confirmation times at most 3 and 2, never more than the search asked."""
    default = load_search_config(str(ROOT / "configs" / "default.yaml")).search
    assert default.remeasure_runs(confirming=False) == (6, 3)
    assert default.remeasure_runs(confirming=True) == CONFIRM_RUNS == (3, 2)
    few = SearchSection(repeats=1, baseline_repeats=2)
    assert few.remeasure_runs(confirming=True) == few.remeasure_runs(confirming=False) == (2, 1)
