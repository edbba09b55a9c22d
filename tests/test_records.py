"""The typed records: summary.json's schema stays in step with the model, and records are strict."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest
from pydantic import ValidationError

from tests.factories import make_row, make_summary, on_two_gpus, synthetic_summary
from trainables.config import ConfigError
from trainables.spec import TrialSpec
from trainables.training.profile import Profile, TopOp
from trainables.training.result import RunResult, TrialResult
from tuner.state.older_summaries import loss_limit_in
from tuner.state.records import LossLimit, Summary, TrialRow, summary_schema
from tuner.state.trial_rows import NOT_IN_ROW, trial_row

ROOT = Path(__file__).resolve().parents[1]


def test_the_committed_schema_is_the_models_schema():
    committed = json.loads((ROOT / "docs" / "summary.schema.json").read_text())
    assert committed == summary_schema(), (
        "regenerate: python -m tuner.state.records > docs/summary.schema.json"
    )


def test_the_documented_command_writes_the_committed_schema_byte_for_byte():
    """`python -m tuner.state.records > docs/summary.schema.json` (docs/architecture.md) is what regenerates it:
    run as __main__, it must print what the test above accepts, in the committed file's formatting."""
    printed = subprocess.run(
        [sys.executable, "-m", "tuner.state.records"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert printed.stdout == (ROOT / "docs" / "summary.schema.json").read_text()
    assert json.loads(printed.stdout) == summary_schema()


def test_a_summary_round_trips_through_json():
    summary = make_summary(
        baseline={"config": {"batch_size": 8}, "tokens_per_s": 100.0, "val_loss": 1.5},
        best={"id": "screen-1", "config": {"batch_size": 64}, "tokens_per_s": 400.0, "speedup": 4.0},
        trials=[make_row("screen-1", config={"batch_size": 64}, tokens_per_s=400.0, feasible=True)],
    )
    again = Summary.model_validate_json(summary.model_dump_json())
    assert again == summary
    assert again.trials[0].phase_name == "screen" and again.best.speedup == 4.0


def test_a_misspelt_field_is_an_error_not_a_silent_extra():
    with pytest.raises(ValidationError, match="tokens_per_sec"):
        TrialRow(id="x", phase="screen", tokens_per_sec=1.0)
    with pytest.raises(ValidationError):
        make_row("x", status="exploded")


def test_phase_name_drops_the_round_number():
    assert make_row("loss_check_3-0", "loss_check_3").phase_name == "loss_check"
    assert make_row("remeasure-2", "remeasure").phase_name == "remeasure"
    assert make_row("x", status="oom").failed and not make_row("y").failed


def test_gpu_use_and_populations_round_trip_and_older_summaries_lack_them():
    summary = Summary.model_validate(on_two_gpus(synthetic_summary(), gpu1_factor=1.05))
    assert Summary.model_validate_json(summary.model_dump_json()) == summary
    (host,) = summary.gpu_population
    assert host.verdict == host.pooled.verdict == "differ" and host.gpus == [0, 1]
    assert [(u.gpu, sorted(u.spans)) for u in summary.gpu_usage][1] == (
        1, ["loss_check", "probe", "remeasure", "screen", "search"]
    )  # fmt: skip
    older = make_summary(baseline={"config": {}})
    assert older.gpu_usage == [] and older.gpu_population == []


def test_a_summary_from_before_the_loss_limit_record_migrates_its_tolerance_into_the_loss_limit():
    older = {"baseline": {"val_loss": 1.5}, "tolerance": {"value": 0.05, "mode": "relative", "limit": 1.575}}
    limit = Summary.model_validate(older).loss_limit
    assert (limit.baseline_loss, limit.tolerance, limit.mode, limit.limit) == (1.5, 0.05, "relative", 1.575)
    no_limit = {
        "baseline": {"val_loss": 1.5},
        "tolerance": {"value": 0.05, "mode": "absolute", "limit": None},
    }
    assert Summary.model_validate(no_limit).loss_limit is None
    assert "tolerance" not in Summary.model_validate(older).model_dump()


def test_a_summary_that_named_its_loss_limit_loss_gate_is_read_as_written():
    written = {"baseline_loss": 1.5, "tolerance": 0.05, "mode": "absolute", "limit": 1.56, "noise": 0.01}
    older = {"baseline": {"val_loss": 1.5}, "loss_gate": written}
    summary = Summary.model_validate(older)
    assert summary.loss_limit == LossLimit.model_validate(written)
    assert "loss_gate" not in summary.model_dump() and summary.model_dump()["loss_limit"]["limit"] == 1.56
    assert loss_limit_in(older) == written == loss_limit_in({"loss_limit": written})
    assert loss_limit_in({"baseline": {}}) is None
    assert Summary.model_validate({"loss_gate": None}).loss_limit is None


def test_every_figure_a_trial_reports_has_a_home_in_its_row():
    # A figure added to RunResult (or TrialResult) must be a TrialRow field of the same name, or be left
    # out, with its reason, in the one place for that (tuner/state/trial_rows.py:NOT_IN_ROW): never dropped unseen.
    reported = {f.name for f in fields(TrialResult)}
    homeless = reported - set(TrialRow.model_fields) - set(NOT_IN_ROW)
    assert not homeless, f"give these a TrialRow field or a NOT_IN_ROW reason: {sorted(homeless)}"
    assert set(NOT_IN_ROW) <= reported, "NOT_IN_ROW names a figure no trial reports"
    assert not set(NOT_IN_ROW) & set(TrialRow.model_fields), "left out, yet a row has a field for it"
    assert all(f.metadata.get("doc") for f in fields(TrialResult)), "every figure says what it is"
    assert {f.name for f in fields(RunResult)} <= reported


def _distinct(name: str, kind: str, n: int):
    """A value of the field's type that no other field has, so a figure carried to the wrong key shows."""
    if kind == "RunStatus":
        return "oom"
    if kind.startswith("CacheUse"):
        return "partial"
    if kind.startswith("tuple"):
        return ({"step": n},)
    if kind.startswith("dict"):
        return {name: 1000.5 + n}
    if kind.startswith("Profile"):
        return Profile(
            bound="memory",
            reason=f"{name}-value",
            steps=n,
            step_ms=1.5,
            busy=0.5,
            compute_share=0.25,
            top_ops=(TopOp("aten::mul", 0.5, "memory"),),
        )
    if kind.startswith("int"):
        return 1000 + n
    if kind.startswith("float"):
        return 1000.5 + n
    return f"{name}-value"


def test_a_row_keeps_every_figure_of_a_trials_last_report():
    values = {f.name: _distinct(f.name, str(f.type), n) for n, f in enumerate(fields(TrialResult))}
    reported = TrialResult(**values)
    fields_of_row = trial_row(reported.metrics(), TrialSpec.of({"batch_size": 8}), None, "trial-dir", "t1")
    row = TrialRow(**fields_of_row, id="screen-0", phase="screen")
    kept = {name: getattr(row, name) for name in values if name not in NOT_IN_ROW}
    assert kept == {name: values[name] for name in kept}


def test_a_specs_labels_reach_its_row_through_tunes_plain_config():
    spec = TrialSpec.of({"batch_size": 8}, knobs={"batch_size": 8}, screen_id="screen-3", twin_of="screen-3")
    spec = spec.labelled(case=1, repeat=0)
    back = TrialSpec.of_tune(json.loads(json.dumps(spec.as_tune())))  # as Ray keeps it (params.json)
    assert back == spec
    row = TrialRow(**trial_row({"status": "ok"}, back, None, None), id="loss_check_0-0", phase="loss_check_0")
    assert (row.config, row.screen_id, row.twin_of, row.case, row.repeat) == (
        {"batch_size": 8},
        "screen-3",
        "screen-3",
        1,
        0,
    )
    assert row.train == spec.train.model_dump()


def test_a_specs_gpu_share_travels_apart_from_its_training_config_and_is_the_trials_memory_cap():
    spec = TrialSpec.of({"batch_size": 8}).with_placement(gpu_share=0.25)
    back = TrialSpec.of_tune(json.loads(json.dumps(spec.as_tune())))  # as Ray keeps it (params.json)
    assert back == spec and back.train.gpu_memory_fraction is None, "not part of what it trains"
    assert back.trained.gpu_memory_fraction == 0.25, "the loop caps the run at its share"
    row = TrialRow(**trial_row({"status": "ok"}, back, None, None), id="loss_check_0-0", phase="loss_check_0")
    assert row.train["gpu_memory_fraction"] == 0.25, "its row shows the share it trained under, as before"
    own = TrialSpec.of({"batch_size": 8, "gpu_memory_fraction": 0.5})
    assert own.trained.gpu_memory_fraction == 0.5, "a user's own cap stands where the search places nothing"
    with pytest.raises(ConfigError, match="gpu_share"):
        spec.with_placement(gpu_share=1.5)
