"""The built-in corpus (trainables/data/corpora.py): built from this interpreter's and torch's sources, the same
text every time, cached, in a small fixed vocabulary, and usable from the training CLI by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_train import cli_in_process
from trainables.common.errors import DataError
from trainables.data import CharTokenizer, corpora, load_char_data, resolve_corpus
from trainables.data.corpora import REPLACEMENT_CHAR

REPO = Path(__file__).resolve().parents[1]
SPEC = "builtin:python-source"
# The tiny one-layer hybrid of tests/test_train.py, on the keys the CLI takes.
TINY = [
    "model.d_model=32",
    "model.n_layers=1",
    "model.rwkv_n_heads=2",
    "model.rwkv_mix_lora_rank=8",
    "model.rwkv_decay_lora_rank=8",
    "model.mamba_d_state=8",
    "model.mamba_headdim=16",
    "model.mamba_chunk_size=16",
    "seq_len=32",
    "batch_size=4",
    "eval_tokens=1024",
    "eval_batch_size=16",
    "timing_warmup_steps=1",
    "device=cpu",
]


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_two_cold_builds_give_the_same_text(cache_dir, tmp_path_factory, monkeypatch):
    first = corpora.build(SPEC)
    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path_factory.mktemp("second")))
    second = corpora.build(SPEC)
    assert not first.from_cache and not second.from_cache
    assert first.cache_file != second.cache_file  # two builds from disk, not one read twice
    assert first.text == second.text
    recorded = json.loads(first.cache_file.with_suffix(".json").read_text())["text_sha256"]
    assert resolve_corpus(SPEC).sha256 == recorded


def test_the_second_call_reads_the_cache_and_never_rebuilds(cache_dir, monkeypatch):
    built = resolve_corpus(SPEC)
    cache_file = next((cache_dir / "builtin").glob("python-source-*.txt"))
    written = cache_file.stat().st_mtime_ns

    def rebuild(files):
        raise AssertionError("the corpus was rebuilt although its cache matches")

    monkeypatch.setattr(corpora, "join_sources", rebuild)
    cached = resolve_corpus(SPEC)
    assert cached.sha256 == built.sha256
    assert cache_file.stat().st_mtime_ns == written
    assert "built into" in built.source and "cached at" in cached.source


def test_a_damaged_cache_is_rebuilt(cache_dir):
    built = corpora.build(SPEC)
    built.cache_file.write_text("not the corpus\n")
    again = corpora.build(SPEC)
    assert not again.from_cache and again.text == built.text


def test_the_text_is_python_source_with_headers_in_path_order():
    text = corpora.build(SPEC).text
    headers = [line.removeprefix("# file: ") for line in text.splitlines() if line.startswith("# file: ")]
    stdlib = [h for h in headers if h.startswith("stdlib/")]
    torch_files = [h for h in headers if h.startswith("torch/")]
    assert stdlib == sorted(stdlib) and torch_files == sorted(torch_files)
    assert "stdlib/json/decoder.py" in stdlib and "torch/nn/modules/linear.py" in torch_files
    skipped = corpora.SKIP_DIRS
    assert not any(part in skipped for h in headers for part in h.split("/")[1:-1])
    assert len(text) > 20_000_000  # enough for a ~100M-parameter model to train for a while


def test_the_vocabulary_stays_small_whatever_the_sources_hold():
    text = corpora.build(SPEC).text
    allowed = {"\t", "\n", REPLACEMENT_CHAR} | {chr(c) for c in range(0x20, 0x7F)}
    assert set(text) <= allowed
    assert 90 <= CharTokenizer.from_text(text).vocab_size <= 98
    assert corpora.clean_text("naïve\r\n\x0cλ = '\x00'".encode() + b"\xff") == (
        f"na{REPLACEMENT_CHAR}ve\n{REPLACEMENT_CHAR}{REPLACEMENT_CHAR} = '{REPLACEMENT_CHAR}'{REPLACEMENT_CHAR}\n"
    )


def test_an_unknown_name_is_one_line_naming_the_known_ones():
    with pytest.raises(DataError) as err:
        load_char_data("builtin:python-sources")
    assert str(err.value) == (
        "data 'builtin:python-sources': no built-in corpus of that name (known: builtin:python-source)"
    )


def test_tuner_data_may_name_it(monkeypatch):
    monkeypatch.setenv("TUNER_DATA", SPEC)
    corpus = resolve_corpus()
    assert corpus.source.startswith(f"env TUNER_DATA={SPEC}: {SPEC}: Python ")


def test_the_training_cli_trains_on_it_by_name(tmp_path, monkeypatch):
    """The CLI's `main` in this process (tests/test_train.py runs the CLI as a subprocess, as a user does)."""
    monkeypatch.setenv("TUNER_OFFLINE", "1")
    monkeypatch.chdir(REPO)
    sets = [a for s in [*TINY, "max_steps=2", "eval_interval=2"] for a in ("--set", s)]
    done = cli_in_process("--data", SPEC, *sets, "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("ok: val_loss ") and "| 2 steps" in done.stdout
    assert f"hybrid LM on {SPEC}: Python " in done.stderr
    vocab = CharTokenizer.load(tmp_path / "tokenizer.json")
    assert vocab == CharTokenizer.from_text(corpora.build(SPEC).text)


def test_the_training_cli_refuses_an_unknown_name_in_one_line(monkeypatch, capsys):
    """The CLI's `main` in this process (a subprocess's imports were most of this test; the one above runs
    the CLI as a user does)."""
    from trainables.train import main

    monkeypatch.setenv("TUNER_OFFLINE", "1")
    monkeypatch.chdir(REPO)
    assert main(["--data", "builtin:nope", *[a for s in TINY for a in ("--set", s)]]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: data 'builtin:nope': no built-in corpus of that name (known: builtin:python-source)"
    ]
