"""Bad input caught before any work: the search runs the checks `python -m trainables.train` makes (one
function, trainables/preflight.py) before Ray starts and before OUT is touched; durations in plain seconds."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainables import train
from tuner import search
from tuner.config import SearchSection, load_search_config

ROOT = Path(__file__).resolve().parents[1]
SMOKE = str(ROOT / "configs" / "smoke.yaml")
SHAKESPEARE = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"


@pytest.fixture
def corpus(tmp_path) -> Path:
    if SHAKESPEARE.exists():
        return SHAKESPEARE
    path = tmp_path / "corpus.txt"  # a stand-in of the same shape: enough text for the smoke model
    path.write_text("".join(chr(32 + (i * 7919) % 90) for i in range(400_000)))
    return path


@pytest.fixture
def no_ray(monkeypatch):
    """Ray must not start: a check that came after it would fail this test, not pass it."""

    def refuse(*args, **kwargs):
        raise AssertionError("Ray started before the bad input was caught")

    monkeypatch.setattr("tuner.ray_session.connect", refuse)


def refused_by_search(capsys, out: Path, data: Path, *argv: str) -> str:
    assert search.main(["--config", SMOKE, "--out", str(out), "--data", str(data), *argv]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert not out.exists(), list(out.iterdir())  # nothing written, not even an empty OUT
    return lines[0]


def refused_by_train(capsys, data: Path, *argv: str) -> str:
    assert train.main(["--config", SMOKE, "--data", str(data), *argv]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


@pytest.mark.parametrize(
    "key, value, needle",
    [
        ("workload", "no_such_module:make", "workload': no module named 'no_such_module'"),
        ("seq_len", "5000000", "seq_len"),
        ("device", "cuda", "config key 'device': 'cuda' asked for but CUDA is not available"),
        ("kernels", "fused", "config key 'kernels': 'fused' needs a CUDA device"),
        ("eval_tokens", "50000000", "config key 'eval_tokens': 50,000,000 is more than the validation split"),
        ("eval_batch_size", "100000", "config key 'eval_batch_size': 100,000 is more than the"),
    ],
)
def test_the_search_refuses_what_the_training_cli_refuses_with_the_same_line(
    capsys, tmp_path, corpus, no_ray, key, value, needle
):
    alone = refused_by_train(capsys, corpus, "--set", f"{key}={value}")
    line = refused_by_search(capsys, tmp_path / "out", corpus, "--set", f"train.{key}={value}")
    assert needle in line and needle in alone, (line, alone)
    assert (
        line.replace("key 'train.", "key '") == alone
    )  # one preflight, one wording (the search names the section)


def test_a_corpus_too_small_for_seq_len_is_refused_before_ray(capsys, tmp_path, no_ray):
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("abcd")
    line = refused_by_search(capsys, tmp_path / "out", tiny)
    assert "config key 'seq_len': 64 needs 65 tokens per window" in line and "holds 3" in line
    assert refused_by_train(capsys, tiny) == line


def test_an_earlier_out_is_left_as_it_was_by_bad_input(capsys, tmp_path, corpus, no_ray):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert search.main(["--config", SMOKE, "--out", str(out), "--set", "train.device=cuda"]) == 2
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


@pytest.mark.parametrize(
    "where, needle",
    [("file/job.yaml", "is not writable"), ("folder", "is a directory")],
)
def test_an_unwritable_emit_rayjob_path_is_refused_before_the_search(
    capsys, tmp_path, corpus, no_ray, where, needle
):
    (tmp_path / "file").write_text("a file, not a folder")
    (tmp_path / "folder").mkdir()
    line = refused_by_search(capsys, tmp_path / "out", corpus, "--emit-rayjob", str(tmp_path / where))
    assert line.startswith("error: --emit-rayjob: ") and needle in line, line


@pytest.mark.parametrize(
    "item, seconds",
    [
        ("search.time_budget=90", 90),
        ("search.time_budget=1.5", 1.5),
        ("search.compile_deadline=120", 120),
        ("search.time_budget=2m30s", 150),
    ],
)
def test_durations_take_plain_seconds(item, seconds):
    from tuner.config import parse_duration

    cfg = load_search_config(SMOKE, [item])
    key = item.split("=")[0].split(".")[1]
    assert parse_duration(getattr(cfg.search, key)) == seconds


def test_time_budget_option_takes_plain_seconds():
    assert SearchSection(time_budget=90).time_budget == "90"


@pytest.mark.parametrize("value", ["0s", "0", "0m"])
def test_a_zero_budget_is_refused(capsys, tmp_path, corpus, no_ray, value):
    line = refused_by_search(capsys, tmp_path / "out", corpus, "--time-budget", value)
    assert "config key 'search.time_budget'" in line and "no time at all" in line, line


def test_a_cluster_driver_leaves_the_device_to_the_trials_hardware_probe(tmp_path, corpus, monkeypatch):
    """A Ray Job's driver (RAY_ADDRESS set) or --address: the head may have no GPU its workers have."""
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    argv = [
        "--config",
        SMOKE,
        "--out",
        str(tmp_path / "out"),
        "--data",
        str(corpus),
        "--set",
        "train.device=cuda",
    ]
    cfg, *_ = search.read_config(search.build_parser().parse_args(argv), tmp_path / "out")
    assert cfg.train["device"] == "cuda"
