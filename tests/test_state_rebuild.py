"""A damaged OUT/state.json on --resume: rebuilt with only what is safe to keep (the config, no phase marked
finished), so every phase runs again and takes its finished trials from the ledgers; or refused in one line
saying how to go on, where the trials in OUT were trained by other settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from toy_workload import TOY

from trainables.config import ConfigError
from tuner.config import SearchConfig
from tuner.runs.ledger import Ledger
from tuner.state.search_state import State
from tuner.state.state_files import DAMAGED_STATE, rebuild_state

SHA = "ab" * 32
CFG = SearchConfig(train={**TOY}, search={"space": {"batch_size": [8, 16]}, "trials": 3})


def out_with_rows(tmp_path: Path, n: int = 2, **train) -> Path:
    ledger = Ledger(tmp_path, "screen")
    trained = {**CFG.train.model_dump(), "data_sha256": SHA, **train}
    for i in range(n):
        ledger.append(
            {"status": "ok", "tokens_per_s": 1000.0 + i, "config": {"batch_size": 8}, "train": trained}
        )
    return tmp_path


@pytest.mark.parametrize(
    "damage, problem",
    [
        (b"\x00\x17garbage\xff", "not JSON"),
        (json.dumps({"config": CFG.model_dump(), "phases": {}}).encode()[:40], "not JSON"),  # cut short
        (b'["a list"]', "not a JSON object"),
        (
            json.dumps({"config": {"train": {}, "bogus": 1}, "phases": {"screen": []}}).encode(),
            "no valid config",
        ),
    ],
    ids=["garbage", "cut", "not-an-object", "bad-config"],
)
def test_a_damaged_state_is_rebuilt_with_the_config_and_no_finished_phase(tmp_path, damage, problem):
    out = out_with_rows(tmp_path)
    (out / "state.json").write_bytes(damage)
    said: list[str] = []
    assert rebuild_state(out, CFG, SHA, said.append)
    state = State(out)  # reads as the search reads it
    assert state.data["phases"] == {} and state.phase("screen") is None
    assert SearchConfig(**state.data["config"]).model_dump() == {
        **CFG.model_dump(),
        "train": {**CFG.model_dump()["train"], "data_sha256": SHA},
    }
    assert (out / DAMAGED_STATE).read_bytes() == damage  # kept, not lost
    assert len(said) == 1 and problem in said[0] and "2 in all" in said[0], said
    assert "every phase runs again" in said[0]
    assert not rebuild_state(out, CFG, SHA, said.append)  # now whole: left alone


def test_a_readable_config_is_kept_and_only_the_phases_are_dropped(tmp_path):
    out = out_with_rows(tmp_path)
    own = {**CFG.model_dump(), "train": {**CFG.model_dump()["train"], "data_sha256": SHA, "seed": 7}}
    (out / "state.json").write_text(
        json.dumps({"config": own, "command": "python -m tuner.search x", "phases": 3})
    )
    said: list[str] = []
    assert rebuild_state(out, CFG, "other", said.append)
    state = State(out)
    assert state.data == {"config": own, "phases": {}, "command": "python -m tuner.search x"}
    assert "its own config" in said[0]


def test_a_whole_state_is_left_alone(tmp_path):
    state = State(out_with_rows(tmp_path))
    state.data.update(config=CFG.model_dump(), phases={"hardware": {"cpus": 2}})
    state.save()
    before = state.path.read_bytes()
    assert not rebuild_state(tmp_path, CFG, SHA, print)
    assert state.path.read_bytes() == before and not (tmp_path / DAMAGED_STATE).exists()
    assert not rebuild_state(tmp_path / "none", CFG, SHA, print)  # no state at all: nothing to rebuild


@pytest.mark.parametrize("field, value", [("data_sha256", "cd" * 32), ("seq_len", 32)])
def test_trials_of_other_settings_are_refused_in_one_line_changing_nothing(tmp_path, field, value):
    out = out_with_rows(tmp_path, **{field: value})
    (out / "state.json").write_bytes(b"{cut")
    with pytest.raises(ConfigError) as refused:
        rebuild_state(out, CFG, SHA, print)
    said = str(refused.value)
    assert (
        f"another {field}" in said and "pass the --config, --set and --data that started the search" in said
    )
    assert "\n" not in said
    assert (out / "state.json").read_bytes() == b"{cut" and not (out / DAMAGED_STATE).exists()
