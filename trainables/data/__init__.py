"""The data pipeline of the character LM: corpus, tokenizer, train/val split and batches.

Corpus resolution, first hit wins:
  1. an explicit path (``--data PATH``): a file, or a folder whose ``*.txt`` files are read recursively in
     sorted order and joined, or a built-in corpus by name (``builtin:python-source``: trainables/data/corpora.py);
  2. env ``TUNER_DATA`` (same rules);
  3. tinyshakespeare cached under ``platformdirs.user_cache_dir("hybrid-tuner")`` (env ``TUNER_CACHE_DIR``);
  4. tinyshakespeare downloaded from ``TINYSHAKESPEARE_URL`` (env ``TUNER_CORPUS_URL``), sha256-checked and
     written atomically into the cache; skipped when ``TUNER_OFFLINE=1``;
  5. an embedded corpus that needs no network: this Python's own standard library sources.
A search ships the corpus its driver resolved to every trial through Ray (`shipped_corpus`): a trial takes
it, by its sha256, before any of the above, so no node of a cluster needs its own copy.

Batch number ``step`` is a pure function of ``(seed, step, batch_size, seq_len, len(train))``, and both batch
paths (a DataLoader and a device-resident sampler) gather the same windows, so the loader is a speed knob
that never changes the loss, and a run can resume at any step.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import sys
import sysconfig
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from trainables.common.errors import DataError
from trainables.common.files import corpus_cache_dir, write_atomically
from trainables.data.corpora import BUILTIN_PREFIX, REPLACEMENT_CHAR, builtin_text

log = logging.getLogger(__name__)

TINYSHAKESPEARE_URL = (
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
)
TINYSHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
TINYSHAKESPEARE_FILENAME = "tinyshakespeare.txt"
DOWNLOAD_TIMEOUT_S = 10.0

EMBEDDED_MAX_CHARS = 4_000_000
# Tests, vendored packages and generated codec tables are not the prose-like code we want to model.
_STDLIB_SKIP_DIRS = frozenset(
    {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__", "encodings"}
)

LOADERS = ("dataloader", "device")


@dataclass(frozen=True)
class Corpus:
    text: str
    source: str  # one line saying which corpus this is, for the caller to print
    warnings: tuple[str, ...] = ()  # why earlier sources were passed over (the source line names the last)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------------------------------------- corpus

# Corpora handed to this process by the search (through Ray), by the sha256 of their text.
_SHIPPED: dict[str, Corpus] = {}


@contextmanager
def shipped_corpus(corpus: Corpus | None) -> Iterator[None]:
    """While inside, `load_char_data` pinned to this corpus's sha256 takes it instead of resolving one: the
    trial trains on the driver's text without reading a file. Keyed by the hash of the text as it arrived,
    so a trial still never trains on text other than the one its config is pinned to."""
    if corpus is None:
        yield
        return
    digest = corpus.sha256
    _SHIPPED[digest] = corpus
    try:
        yield
    finally:
        _SHIPPED.pop(digest, None)


def resolve_corpus(path: str | os.PathLike | None = None) -> Corpus:
    """Find the training text: explicit path, env TUNER_DATA, cache, download, embedded (in that order)."""
    if path is not None:
        text, what = _read_data_source(path, label="data path")
        return Corpus(text, what)
    env_path = os.environ.get("TUNER_DATA")
    if env_path:
        text, what = _read_data_source(env_path, label="TUNER_DATA")
        return Corpus(text, f"env TUNER_DATA={env_path}: {what}")

    warnings: list[str] = []
    cache_file = corpus_cache_dir() / TINYSHAKESPEARE_FILENAME
    cached = _read_verified(cache_file, warnings)
    if cached is not None:
        source = f"cached tinyshakespeare at {cache_file} ({len(cached)} bytes)"
        return Corpus(cached, source, tuple(warnings))

    if os.environ.get("TUNER_OFFLINE") == "1":
        warnings.append("TUNER_OFFLINE=1")
    else:
        url = os.environ.get("TUNER_CORPUS_URL") or TINYSHAKESPEARE_URL
        downloaded = _download_verified(url, cache_file, warnings)
        if downloaded is not None:
            source = f"downloaded tinyshakespeare from {url} ({len(downloaded)} bytes) into {cache_file}"
            return Corpus(downloaded, source, tuple(warnings))
    text, source = _embedded_text_and_source()
    why = f"; tinyshakespeare not used: {warnings[-1]}" if warnings else ""
    return Corpus(text, f"{source}, the offline default{why}", tuple(warnings))


def _read_data_source(data: str | os.PathLike, label: str) -> tuple[str, str]:
    if str(data).startswith(BUILTIN_PREFIX):
        return builtin_text(str(data))
    return _read_text_source(Path(data), label)


def _read_text_source(path: Path, label: str) -> tuple[str, str]:
    """Text of a file, or of a folder's *.txt files (recursive, sorted, joined); and what was read."""
    if path.is_file():
        files = [path]
    elif path.is_dir():
        files = sorted(p for p in path.rglob("*.txt") if p.is_file())
        if not files:
            raise DataError(f"{label} {path}: folder has no .txt files")
    else:
        raise DataError(f"{label} {path}: no such file or folder")
    parts, size = [], 0
    for file in files:
        raw = file.read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            reason = f"{file} is not UTF-8 text ({err.reason} at byte {err.start})"
            raise DataError(f"{label} {path}: {reason}") from None
        # A file without a final newline must not glue its last line to the next file's first.
        parts.append(text if not text or text.endswith("\n") or file is files[-1] else text + "\n")
        size += len(raw)
    text = "".join(parts)
    if not text:
        raise DataError(f"{label} {path}: empty")
    if path.is_file():
        return text, f"file {path} ({size} bytes)"
    return text, f"folder {path} ({len(files)} .txt files, {size} bytes)"


def _read_verified(cache_file: Path, warnings: list[str]) -> str | None:
    if not cache_file.is_file():
        return None
    raw = cache_file.read_bytes()
    if hashlib.sha256(raw).hexdigest() != TINYSHAKESPEARE_SHA256:
        _warn(warnings, f"ignoring cached {cache_file}: sha256 mismatch")
        return None
    return raw.decode("utf-8")


def _download_verified(url: str, cache_file: Path, warnings: list[str]) -> str | None:
    """The tinyshakespeare text from `url` if its sha256 matches; cached atomically. None on any failure."""
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:
            raw = response.read()
    except (OSError, ValueError) as err:  # URLError, HTTPError, timeouts are OSErrors; bad URLs ValueErrors
        # Offline is ordinary: the corpus's one line says it, not a raw library error on the screen.
        warnings.append(f"download from {url} failed ({getattr(err, 'reason', None) or err})")
        return None
    digest = hashlib.sha256(raw).hexdigest()
    if digest != TINYSHAKESPEARE_SHA256:
        _warn(
            warnings,
            f"download of tinyshakespeare from {url}: sha256 mismatch "
            f"(got {digest}, expected {TINYSHAKESPEARE_SHA256}); not cached",
        )
        return None
    try:
        write_atomically(cache_file, raw)  # trials of one node may download at once
    except OSError as err:  # a read-only cache costs a download next time, not this run
        _warn(warnings, f"could not cache tinyshakespeare at {cache_file}: {err}")
    return raw.decode("utf-8")


def _warn(warnings: list[str], message: str) -> None:
    log.warning(message)
    warnings.append(message)


def embedded_corpus(max_chars: int = EMBEDDED_MAX_CHARS) -> Corpus:
    """The offline corpus: this Python's standard library sources, deterministic for a Python version."""
    return Corpus(*_embedded_text_and_source(max_chars))


@lru_cache(maxsize=2)
def _embedded_text_and_source(max_chars: int = EMBEDDED_MAX_CHARS) -> tuple[str, str]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    parts, n_chars = [], 0
    for source_file in _stdlib_sources(stdlib):
        # Universal newlines: the same text whatever line endings the installation uses.
        text = source_file.read_text(encoding="utf-8", errors="replace")
        if n_chars + len(text) > max_chars:
            break  # whole files only, so no file is cut mid-line
        parts.append(text)
        n_chars += len(text)
    if not parts:
        raise DataError(f"embedded corpus: no readable .py files under {stdlib} (pass --data PATH)")
    text = replace_non_ascii("".join(parts))
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    source = f"embedded: Python {version} standard library sources ({len(parts)} files, {len(text)} chars)"
    return text, source


def _stdlib_sources(stdlib: Path) -> list[Path]:
    found: list[Path] = []
    for folder, subfolders, files in os.walk(stdlib):
        subfolders[:] = [name for name in subfolders if name not in _STDLIB_SKIP_DIRS]
        found.extend(Path(folder, name) for name in files if name.endswith(".py"))
    # Sort by the path relative to stdlib, in POSIX form, so the order is the same on every machine.
    return sorted(found, key=lambda p: p.relative_to(stdlib).as_posix())


def replace_non_ascii(text: str) -> str:
    return re.sub(r"[^\x00-\x7f]", REPLACEMENT_CHAR, text)


# ------------------------------------------------------------------------------------------- tokenizer


_NUMPY_DTYPES = {torch.uint8: np.uint8, torch.int16: np.int16, torch.int32: np.int32}


class CharTokenizer:
    """One token per distinct character of the corpus, ids in code-point order."""

    def __init__(self, chars: list[str] | str):
        chars = list(chars)
        if not chars or any(len(c) != 1 for c in chars) or len(set(chars)) != len(chars):
            raise ValueError("CharTokenizer needs a non-empty list of distinct single characters")
        self.chars = sorted(chars)
        self._code_points = np.array([ord(c) for c in self.chars], dtype=np.uint32)

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        return cls(sorted(set(text)))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    @property
    def dtype(self) -> torch.dtype:
        """The smallest dtype that holds every id; batches widen to int64 on the way out."""
        if self.vocab_size <= 256:
            return torch.uint8
        if self.vocab_size <= 2**15:
            return torch.int16
        return torch.int32

    def encode(self, text: str) -> torch.Tensor:
        code_points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        ids = np.searchsorted(self._code_points, code_points)
        ids_in_range = np.minimum(ids, self.vocab_size - 1)
        unknown = self._code_points[ids_in_range] != code_points
        if unknown.any():
            first = chr(int(code_points[np.argmax(unknown)]))
            raise ValueError(f"character {first!r} is not in the tokenizer's vocabulary")
        return torch.from_numpy(ids.astype(_NUMPY_DTYPES[self.dtype]))

    def decode(self, ids: torch.Tensor | list[int]) -> str:
        if isinstance(ids, torch.Tensor):
            ids = ids.reshape(-1).tolist()
        return "".join(self.chars[i] for i in ids)

    def to_dict(self) -> dict:
        return {"kind": "char", "chars": self.chars}

    @classmethod
    def from_dict(cls, data: dict) -> CharTokenizer:
        if data.get("kind") != "char":
            raise ValueError(f"not a char tokenizer: kind={data.get('kind')!r}")
        return cls(data["chars"])

    def save(self, path: str | os.PathLike) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), ensure_ascii=True) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | os.PathLike) -> CharTokenizer:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CharTokenizer) and self.chars == other.chars

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"


def split_tokens(tokens: torch.Tensor, val_frac: float = 0.1) -> tuple[torch.Tensor, torch.Tensor]:
    """First (1 - val_frac) of the tokens for training, the rest for validation (views, no copies)."""
    if not 0.0 < val_frac < 1.0:
        raise ValueError(f"val_frac must be in (0, 1), got {val_frac}")
    n_train = int(len(tokens) * (1.0 - val_frac))
    if n_train == 0 or n_train == len(tokens):
        raise DataError(f"corpus of {len(tokens)} tokens is too short to split with val_frac={val_frac}")
    return tokens[:n_train], tokens[n_train:]


class CharWindows(torch.utils.data.Dataset):
    """A char corpus as a Dataset for a workload of the user's own: (x, y) windows of seq_len tokens, y
    shifted by one, starting every `stride` tokens (1 for training, seq_len for disjoint val windows).
    It batches itself on a device (`to`, `gather`: trainables.data.datasets.Gatherable), so `loader: device`
    moves only its token tensor there, not a copy of every (overlapping) window."""

    def __init__(self, tokens: torch.Tensor, seq_len: int, stride: int = 1):
        self.tokens, self.seq_len, self.stride = tokens, seq_len, stride

    def __len__(self) -> int:
        return (len(self.tokens) - self.seq_len - 1) // self.stride + 1

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        w = self.tokens[i * self.stride : i * self.stride + self.seq_len + 1].long()
        return w[:-1], w[1:]

    def to(self, device: str | torch.device) -> CharWindows:
        return CharWindows(self.tokens.to(device), self.seq_len, self.stride)

    def gather(self, indices: torch.Tensor) -> list[torch.Tensor]:
        """Windows `indices` as [x, y], each [B, seq_len] int64: what the DataLoader collates of them."""
        window = torch.arange(self.seq_len + 1, device=self.tokens.device)
        return list(split_xy(gather_windows(self.tokens, indices * self.stride, window)))


@dataclass
class CharData:
    corpus: Corpus
    tokenizer: CharTokenizer
    train: torch.Tensor
    val: torch.Tensor
    tokens: torch.Tensor = field(repr=False)


def load_char_data(
    path: str | os.PathLike | None = None, val_frac: float = 0.1, expect_sha256: str | None = None
) -> CharData:
    """Resolve the corpus, build its tokenizer, encode it and split it. With `expect_sha256` (the search
    sets it from the corpus its driver resolved), the corpus the search shipped with that hash, if any;
    else a node that resolves other text refuses to train on it."""
    corpus = _SHIPPED.get(expect_sha256) if expect_sha256 else None
    if corpus is None:
        corpus = resolve_corpus(path)
    if expect_sha256 is not None and corpus.sha256 != expect_sha256:
        raise DataError(
            f"the corpus here ({corpus.source}; sha256 {corpus.sha256[:12]}) is not the one the search "
            f"resolved (sha256 {expect_sha256[:12]}): give every node the same --data or TUNER_DATA"
        )
    tokenizer = CharTokenizer.from_text(corpus.text)
    tokens = tokenizer.encode(corpus.text)
    train, val = split_tokens(tokens, val_frac)
    return CharData(corpus=corpus, tokenizer=tokenizer, train=train, val=val, tokens=tokens)


# --------------------------------------------------------------------------------------------- batches


def gather_windows(tokens: torch.Tensor, offsets: torch.Tensor, window: torch.Tensor) -> torch.Tensor:
    """[B, seq_len + 1] token windows in one indexing op, on the tokens' device, in the tokens' dtype."""
    return tokens[offsets.to(tokens.device, non_blocking=True)[:, None] + window[None, :]]


def split_xy(windows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    windows = windows.long()
    return windows[:, :-1].contiguous(), windows[:, 1:].contiguous()
