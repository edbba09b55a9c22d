"""The data pipeline: corpus resolution, tokenizer, split and both batch paths (CPU, a few seconds)."""

import hashlib
import http.server
import threading
from pathlib import Path

import platformdirs
import pytest
import torch

from tests.shared_files import shared_file
from trainables import data
from trainables.common.errors import DataError
from trainables.data import CharTokenizer, load_char_data, resolve_corpus, split_tokens
from trainables.data.char_batches import batch_offsets, val_window_batches, window_batches
from trainables.data.datasets import step_indices

# Stands in for tinyshakespeare where a test needs bytes whose sha256 the resolver accepts.
FAKE_CORPUS = b"First Citizen:\nBefore we proceed any further, hear me speak.\n" * 50


@pytest.fixture(autouse=True)
def isolated_env(monkeypatch, tmp_path):
    """No test reads the user's cache, the environment's corpus or the network."""
    for name in ("TUNER_DATA", "TUNER_CORPUS_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TUNER_OFFLINE", "1")
    for proxy in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(proxy, raising=False)


@pytest.fixture
def accept_fake_corpus(monkeypatch):
    monkeypatch.setattr(data, "TINYSHAKESPEARE_SHA256", hashlib.sha256(FAKE_CORPUS).hexdigest())


@pytest.fixture
def corpus_server(monkeypatch):
    """A real HTTP server on 127.0.0.1 serving `server.payload` and counting requests, at TUNER_CORPUS_URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            server.requests += 1
            self.send_response(200)
            self.send_header("Content-Length", str(len(server.payload)))
            self.end_headers()
            self.wfile.write(server.payload)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.payload, server.requests = FAKE_CORPUS, 0
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("TUNER_CORPUS_URL", f"http://127.0.0.1:{server.server_address[1]}/input.txt")
    monkeypatch.delenv("TUNER_OFFLINE")
    yield server
    server.shutdown()
    server.server_close()


def test_cache_dir_defaults_to_user_cache(monkeypatch):
    monkeypatch.delenv("TUNER_CACHE_DIR")
    assert data.corpus_cache_dir() == Path(platformdirs.user_cache_dir("hybrid-tuner"))


def cache_file() -> Path:
    return data.corpus_cache_dir() / data.TINYSHAKESPEARE_FILENAME


# ------------------------------------------------------------------------------------------ resolution


def test_explicit_file_wins_over_env(tmp_path, monkeypatch):
    given, other = tmp_path / "given.txt", tmp_path / "other.txt"
    given.write_text("hello world\n")
    other.write_text("from the environment\n")
    monkeypatch.setenv("TUNER_DATA", str(other))
    corpus = resolve_corpus(str(given))
    assert corpus.text == "hello world\n"
    assert corpus.source == f"file {given} (12 bytes)"


def test_folder_reads_txt_files_recursively_sorted(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "2.txt").write_text("second")  # no final newline: one is added before the next file
    (tmp_path / "a.txt").write_text("first\n")
    (tmp_path / "c.txt").write_text("third")
    (tmp_path / "notes.md").write_text("ignored")
    corpus = resolve_corpus(tmp_path)
    assert corpus.text == "first\nsecond\nthird"
    assert corpus.source.startswith(f"folder {tmp_path} (3 .txt files")


def test_env_used_without_path(tmp_path, monkeypatch):
    (tmp_path / "env.txt").write_text("env corpus")
    monkeypatch.setenv("TUNER_DATA", str(tmp_path / "env.txt"))
    corpus = resolve_corpus()
    assert corpus.text == "env corpus"
    assert corpus.source.startswith(f"env TUNER_DATA={tmp_path / 'env.txt'}: file ")


@pytest.mark.parametrize("via_env", [False, True])
@pytest.mark.parametrize("kind", ["missing", "empty file", "folder without txt", "not utf-8"])
def test_unusable_path_is_one_line_data_error(tmp_path, monkeypatch, kind, via_env):
    target = tmp_path / "corpus"
    if kind == "empty file":
        target.write_text("")
    elif kind == "folder without txt":
        target.mkdir()
        (target / "readme.md").write_text("not a corpus")
    elif kind == "not utf-8":
        target.write_bytes(b"caf\xe9\n")
    if via_env:
        monkeypatch.setenv("TUNER_DATA", str(target))
    with pytest.raises(DataError) as err:
        resolve_corpus(None if via_env else str(target))
    message = str(err.value)
    assert str(target) in message and "\n" not in message
    assert ("TUNER_DATA" in message) == via_env
    assert isinstance(err.value, ValueError)


def test_cached_corpus_is_used_offline(accept_fake_corpus):
    cache_file().parent.mkdir(parents=True)
    cache_file().write_bytes(FAKE_CORPUS)
    corpus = resolve_corpus()
    assert corpus.text == FAKE_CORPUS.decode()
    assert corpus.source.startswith(f"cached tinyshakespeare at {cache_file()}")


def test_corrupt_cache_is_ignored(accept_fake_corpus):
    cache_file().parent.mkdir(parents=True)
    cache_file().write_bytes(FAKE_CORPUS[:-1])
    corpus = resolve_corpus()
    assert corpus.source.startswith("embedded: ")
    assert any("sha256 mismatch" in warning for warning in corpus.warnings)


def test_download_is_cached_then_reused(corpus_server, accept_fake_corpus):
    first = resolve_corpus()
    assert first.text == FAKE_CORPUS.decode()
    assert first.source.startswith("downloaded tinyshakespeare from http://127.0.0.1:")
    assert cache_file().read_bytes() == FAKE_CORPUS
    assert [p.name for p in cache_file().parent.iterdir()] == [cache_file().name]  # no temp file left
    second = resolve_corpus()
    assert second.text == first.text
    assert second.source.startswith("cached tinyshakespeare at ")
    assert corpus_server.requests == 1


def test_download_with_wrong_bytes_falls_back_to_embedded_uncached(corpus_server, accept_fake_corpus, caplog):
    corpus_server.payload = FAKE_CORPUS.replace(b"speak", b"shout")
    corpus = resolve_corpus()
    assert [r.levelname for r in caplog.records] == ["WARNING"] and "sha256 mismatch" in caplog.text
    assert corpus_server.requests == 1
    assert corpus.source.startswith("embedded: ")
    assert any("sha256 mismatch" in warning for warning in corpus.warnings)
    assert not cache_file().parent.exists() or not any(cache_file().parent.iterdir())


def test_offline_flag_skips_download(corpus_server, monkeypatch):
    monkeypatch.setenv("TUNER_OFFLINE", "1")
    assert resolve_corpus().source.startswith("embedded: ")
    assert corpus_server.requests == 0


def test_unreachable_url_falls_back_to_embedded(corpus_server, monkeypatch):
    corpus_server.shutdown()
    corpus_server.server_close()  # the port now refuses connections
    corpus = resolve_corpus()
    assert corpus.source.startswith("embedded: ")
    assert any("failed" in warning for warning in corpus.warnings)


def test_embedded_corpus_is_deterministic_ascii_and_sizeable():
    first = data.embedded_corpus()
    data._embedded_text_and_source.cache_clear()  # rebuild from disk, not from the in-process cache
    second = data.embedded_corpus()
    assert first.text == second.text and first.source == second.source
    assert 1_000_000 < len(first.text) <= data.EMBEDDED_MAX_CHARS
    assert set(first.text) <= {chr(i) for i in range(128)} | {data.REPLACEMENT_CHAR}
    assert "def " in first.text and "import " in first.text
    assert first.source.startswith("embedded: Python 3.") and "standard library sources" in first.source
    assert CharTokenizer.from_text(first.text).vocab_size <= 129


def test_non_ascii_maps_to_one_token():
    assert data.replace_non_ascii("café – naïve ✓\n") == "caf\ufffd \ufffd na\ufffdve \ufffd\n"


def test_shared_tinyshakespeare(corpus_server):
    shared = shared_file("data", "tinyshakespeare.txt")
    raw = shared.read_bytes()
    assert hashlib.sha256(raw).hexdigest() == data.TINYSHAKESPEARE_SHA256
    loaded = load_char_data(shared)
    assert loaded.tokenizer.vocab_size == 65
    assert loaded.tokenizer.dtype == torch.uint8
    assert len(loaded.train) + len(loaded.val) == len(raw) == 1_115_394
    # The real bytes pass the real checksum through the download path too.
    corpus_server.payload = raw
    downloaded = load_char_data()
    assert downloaded.corpus.source.startswith("downloaded tinyshakespeare")
    assert downloaded.tokenizer == loaded.tokenizer and torch.equal(downloaded.val, loaded.val)


# ------------------------------------------------------------------------------ tokenizer and split


def test_tokenizer_round_trip_and_save_load(tmp_path):
    text = "To be, or not to be: that is the question.\n\ufffd"
    tokenizer = CharTokenizer.from_text(text)
    ids = tokenizer.encode(text)
    assert ids.dtype == torch.uint8 and ids.shape == (len(text),)
    assert tokenizer.decode(ids) == text
    assert tokenizer.chars == sorted(set(text))
    tokenizer.save(tmp_path / "tokenizer.json")
    loaded = CharTokenizer.load(tmp_path / "tokenizer.json")
    assert loaded == tokenizer and torch.equal(loaded.encode(text), ids)
    assert CharTokenizer.from_dict(tokenizer.to_dict()) == tokenizer
    with pytest.raises(ValueError, match="'Z'"):
        tokenizer.encode("Zebra")


@pytest.mark.parametrize(
    ("n_chars", "dtype"),
    [(256, torch.uint8), (257, torch.int16), (2**15, torch.int16), (40_000, torch.int32)],
)
def test_token_dtype_is_compact(n_chars, dtype):
    text = "".join(chr(0x100 + i) for i in range(n_chars))
    tokenizer = CharTokenizer.from_text(text)
    ids = tokenizer.encode(text)
    assert ids.dtype == dtype
    assert ids.tolist() == list(range(n_chars))
    assert tokenizer.decode(ids) == text


def test_split_first_90_percent_train():
    tokens = torch.arange(1000)
    train, val = split_tokens(tokens)
    assert torch.equal(train, tokens[:900]) and torch.equal(val, tokens[900:])
    train, val = split_tokens(tokens[:11])
    assert (len(train), len(val)) == (9, 2)


def test_load_char_data_bundle(tmp_path):
    (tmp_path / "corpus.txt").write_text("abcdefghij" * 100)
    loaded = load_char_data(tmp_path / "corpus.txt")
    assert loaded.tokenizer.vocab_size == 10
    assert (len(loaded.train), len(loaded.val)) == (900, 100)
    assert loaded.tokenizer.decode(loaded.val[:10]) == "abcdefghij"


def test_a_node_with_another_corpus_refuses_to_train_on_it(tmp_path):
    # The search pins the sha256 of the text its driver resolved; a cluster node that resolves other
    # text (no network there, another file at the same path) stops with one line instead.
    (tmp_path / "corpus.txt").write_text("abcdefghij" * 100)
    pinned = hashlib.sha256(("abcdefghij" * 100).encode()).hexdigest()
    assert load_char_data(tmp_path / "corpus.txt", expect_sha256=pinned).corpus.sha256 == pinned
    (tmp_path / "corpus.txt").write_text("klmnopqrst" * 100)
    with pytest.raises(
        DataError,
        match=rf"sha256 [0-9a-f]{{12}}\) is not the one the search resolved \(sha256 {pinned[:12]}\)",
    ):
        load_char_data(tmp_path / "corpus.txt", expect_sha256=pinned)


# --------------------------------------------------------------------------------------------- batches

TOKENS = CharTokenizer.from_text(FAKE_CORPUS.decode()).encode(FAKE_CORPUS.decode())


def take(loader, n=6, start_step=0, batch_size=4, seq_len=16, seed=7, num_workers=0):
    batches = window_batches(
        TOKENS,
        loader=loader,
        batch_size=batch_size,
        seq_len=seq_len,
        seed=seed,
        device="cpu",
        num_workers=num_workers,
        start_step=start_step,
        num_steps=n,
    )
    return list(batches)


def test_batch_offsets_pure_and_in_range():
    first = batch_offsets(seed=1, step=3, batch_size=64, seq_len=10, n_tokens=50)
    assert torch.equal(first, batch_offsets(seed=1, step=3, batch_size=64, seq_len=10, n_tokens=50))
    assert first.dtype == torch.int64
    assert first.min() >= 0 and first.max() <= 50 - 10 - 1
    assert not torch.equal(first, batch_offsets(seed=1, step=4, batch_size=64, seq_len=10, n_tokens=50))
    assert not torch.equal(first, batch_offsets(seed=2, step=3, batch_size=64, seq_len=10, n_tokens=50))
    with pytest.raises(DataError, match="fewer than seq_len"):
        batch_offsets(seed=1, step=0, batch_size=2, seq_len=50, n_tokens=50)


def test_the_draws_of_a_step_are_the_ones_searches_have_trained_on():
    # Values as drawn before the token windows and a Dataset's examples shared step_generator: a change
    # to either draw changes every run's batches (and a resumed run's), so it must show here first.
    assert batch_offsets(7, 3, 6, 16, 1000).tolist() == [326, 101, 692, 982, 541, 241]
    assert batch_offsets(0, 12345, 4, 8, 50).tolist() == [7, 14, 25, 15]
    assert step_indices(7, 3, 6, 1000).tolist() == [366, 773, 533, 741, 51, 373]
    assert step_indices(0, 12345, 4, 50).tolist() == [16, 37, 12, 25]


def test_batches_are_shifted_windows_at_the_offsets():
    for step, (x, y) in enumerate(take("device", n=3)):
        assert x.dtype == y.dtype == torch.int64 and x.shape == y.shape == (4, 16)
        offsets = batch_offsets(7, step, 4, 16, len(TOKENS))
        for row, offset in enumerate(offsets.tolist()):
            assert x[row].tolist() == TOKENS[offset : offset + 16].tolist()
            assert y[row].tolist() == TOKENS[offset + 1 : offset + 17].tolist()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_dataloader_path_equals_device_path(num_workers):
    device_batches = take("device", start_step=2)
    loader_batches = take("dataloader", start_step=2, num_workers=num_workers)
    assert len(device_batches) == len(loader_batches) == 6
    for (dx, dy), (lx, ly) in zip(device_batches, loader_batches):
        assert torch.equal(dx, lx) and torch.equal(dy, ly)
    assert not torch.equal(device_batches[0][0], device_batches[1][0])


@pytest.mark.parametrize("loader", ["dataloader", "device"])
def test_start_step_resumes_the_same_sequence(loader):
    full = take(loader, n=8)
    resumed = take(loader, n=3, start_step=5)
    for (fx, fy), (rx, ry) in zip(full[5:], resumed, strict=True):
        assert torch.equal(fx, rx) and torch.equal(fy, ry)


def test_endless_without_num_steps():
    batches = window_batches(TOKENS, loader="device", batch_size=2, seq_len=8, seed=0, device="cpu")
    assert len([next(batches) for _ in range(50)]) == 50


def test_bad_loader_and_short_split_fail_at_call():
    with pytest.raises(ValueError, match="loader"):
        window_batches(TOKENS, loader="gpu", batch_size=2, seq_len=8, seed=0, device="cpu")
    with pytest.raises(DataError):
        window_batches(TOKENS[:8], loader="dataloader", batch_size=2, seq_len=8, seed=0, device="cpu")


def test_val_windows_fixed_and_independent_of_batch_size():
    val = torch.arange(1000).to(torch.int16)
    by_3 = val_window_batches(val, seq_len=10, batch_size=3, max_tokens=205, device="cpu")
    by_7 = val_window_batches(val, seq_len=10, batch_size=7, max_tokens=205, device="cpu")
    x3, y3 = torch.cat([x for x, _ in by_3]), torch.cat([y for _, y in by_3])
    x7, y7 = torch.cat([x for x, _ in by_7]), torch.cat([y for _, y in by_7])
    assert torch.equal(x3, x7) and torch.equal(y3, y7)
    assert [len(x) for x, _ in by_3] == [3] * 6 + [2] and x3.dtype == torch.int64
    assert torch.equal(x3, torch.arange(200).view(20, 10))  # non-overlapping, from the start
    assert torch.equal(y3, x3 + 1)
    everything = val_window_batches(val, seq_len=10, batch_size=1000, max_tokens=None, device="cpu")
    assert everything[0][0].shape == (99, 10)  # the 100th window would need a 1001st token for its target
    with pytest.raises(DataError):
        val_window_batches(val[:10], seq_len=10, batch_size=4, max_tokens=None, device="cpu")


@pytest.mark.parametrize("stride", [1, 16])
def test_char_windows_gather_on_the_device_what_the_dataloader_collates(stride):
    from torch.utils.data._utils.collate import default_collate

    from trainables.data import CharWindows
    from trainables.data.datasets import Gatherable

    tokens = torch.randint(0, 60, (400,), dtype=torch.uint8)  # compact ids, as load_char_data makes them
    windows = CharWindows(tokens, seq_len=16, stride=stride)
    assert isinstance(windows, Gatherable)
    idx = torch.tensor([0, 5, len(windows) - 1, 5])
    gathered = windows.to(torch.device("cpu")).gather(idx)
    collated = default_collate([windows[int(i)] for i in idx])
    assert type(gathered) is type(collated) and len(gathered) == 2
    for got, want in zip(gathered, collated):
        assert got.dtype == want.dtype == torch.int64 and got.is_contiguous()
        assert torch.equal(got, want)
    assert torch.equal(gathered[1][:, :-1], gathered[0][:, 1:])  # y is x shifted by one
