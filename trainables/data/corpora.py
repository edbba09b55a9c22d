"""Built-in corpora: text that every install of the product carries, so no machine needs a download.

`--data builtin:python-source` (or `data: builtin:python-source` in a config, or `TUNER_DATA`) is the
Python source of the running interpreter's standard library followed by that of the installed torch, the
one package the product cannot run without and by far its largest. Ray (28M characters here) is left out:
the GPU machines' bundle trims it, so its text would differ between installs of one version, and it would
not change the picture below (~14 epochs instead of ~22 for 1B tokens). How it is built (CORPUS_FORMAT names
these rules; change one and bump it, so every cache is rebuilt):
- files: every ``*.py`` under each root, with folders named in SKIP_DIRS pruned (test suites and their
  helpers, vendored code, caches, other packages, generated codec tables), in the order of their paths
  relative to the root (POSIX form), so the order is the same on every machine;
- decoding: UTF-8, each undecodable byte becomes U+FFFD; ``\\r\\n`` and ``\\r`` become ``\\n``;
- characters: tab, newline and printable ASCII are kept, every other character becomes REPLACEMENT_CHAR
  (source code is ASCII but for a few names, docstrings and test strings: 0.003% of its characters), so
  the char tokenizer's vocabulary is at most 98 characters, whatever the sources hold;
- layout: each file is a header line ``# file: <source>/<relative path>`` and its text, ending in a
  newline; files are joined by one empty line.
The text is cached under ``<corpus_cache_dir()>/builtin/``, keyed by what it was built from: the format,
the Python version, the package versions and every file's relative path, size and mtime; a sidecar JSON
holds the text's sha256, checked on every read. The sha256 is the corpus's fingerprint like any other
(`data_sha256` pins it), so nodes whose Python or torch differ are caught by the pin; a search ships its
driver's text to the trials anyway.

Measured here (CPU, 2 shared cores, Python 3.11.7, torch 2.13.0+cpu): 2,731 files, 51,057,286 characters
(standard library 612 files, 10.7M; torch 2,119 files, 40.3M), 97 distinct (258 before the vocabulary rule;
1,610 characters, 0.003%, replaced); built in 0.9 s with the files in the page cache, 0.2 s from the cache
(sha256 checked); the char tokenizer then takes ~3.5 s to build its vocabulary and encode it. Another
Python or torch gives other figures (the source line says which). What it holds for a ~100M-parameter
model: the training split (90%) is 46M tokens, 0.46 tokens per parameter per epoch; a 1B-token planned
run is ~22 epochs of it. Repeating data costs little up to ~4 epochs (Muennighoff et al. 2023, "Scaling
Data-Constrained Language Models"), so expect a 100M model's validation loss to part from its training
loss after ~2-4 epochs (~100-200M tokens): a loss limit on a prefix up to there judges training, not
memorisation; the full 1B-token run would overfit.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import platform
import re
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trainables.common.errors import DataError
from trainables.common.files import corpus_cache_dir, write_atomically

log = logging.getLogger(__name__)

BUILTIN_PREFIX = "builtin:"  # a `data` value naming a built-in corpus, not a path
# Every character outside a corpus's vocabulary becomes this one token (here and in trainables/data/__init__.py's
# embedded corpus, every non-ASCII one), so the vocabulary is small and stable.
REPLACEMENT_CHAR = "\ufffd"
CORPUS_FORMAT = 1
SKIP_DIRS = frozenset(
    {
        "test",
        "tests",
        "idle_test",
        "testing",  # torch.testing: test helpers and generated test tables
        "_vendor",
        "site-packages",
        "dist-packages",
        "__pycache__",
        "encodings",  # generated codec tables
    }
)
# Tab, newline and printable ASCII stay; everything else is one token.
_OUTSIDE_VOCAB = re.compile(r"[^\t\n\x20-\x7e]")


@dataclass(frozen=True)
class SourceRoot:
    label: str  # the header's first path part: "stdlib", "torch"
    what: str  # for the source line: "Python 3.11.7 standard library"
    version: str  # part of the cache key
    path: Path


@dataclass(frozen=True)
class SourceFile:
    header: str  # "<label>/<path relative to its root>", POSIX
    path: Path
    size: int
    mtime_ns: int


@dataclass(frozen=True)
class Built:
    text: str
    source: str  # one line for Corpus.source
    cache_file: Path
    from_cache: bool


def is_builtin(data: str | os.PathLike | None) -> bool:
    """Whether a `data` value names a built-in corpus rather than a file or folder."""
    return isinstance(data, str) and data.startswith(BUILTIN_PREFIX)


def builtin_text(spec: str) -> tuple[str, str]:
    """The text of built-in corpus `spec` ("builtin:NAME") and one line saying what it is; DataError
    (one line) for an unknown name."""
    built = build(spec)
    return built.text, built.source


def build(spec: str) -> Built:
    """The corpus from its cache when the cache matches what it would be built from, else built and cached."""
    name = spec.removeprefix(BUILTIN_PREFIX)
    if name not in BUILTINS:
        known = ", ".join(BUILTIN_PREFIX + n for n in BUILTINS)
        raise DataError(f"data {spec!r}: no built-in corpus of that name (known: {known})")
    roots = BUILTINS[name]()
    files = [file for root in roots for file in source_files(root)]
    key = cache_key(name, roots, files)
    cache_file = corpus_cache_dir() / "builtin" / f"{name}-{key[:16]}.txt"
    text = _read_cache(cache_file, key)
    from_cache = text is not None
    if text is None:
        text = join_sources(files)
        _write_cache(cache_file, key, text)
    what = " + ".join(root.what for root in roots)
    how = "cached at" if from_cache else "built into"
    source = f"{spec}: {what} sources ({len(files)} files, {len(text):,} chars), {how} {cache_file}"
    return Built(text, source, cache_file, from_cache)


# --------------------------------------------------------------------------------------------- sources


def python_source_roots() -> list[SourceRoot]:
    python = platform.python_version()
    stdlib = SourceRoot(
        "stdlib", f"Python {python} standard library", python, Path(sysconfig.get_path("stdlib"))
    )
    return [stdlib, package_root("torch")]


def package_root(package: str) -> SourceRoot:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise DataError(f"built-in corpus: package {package} is not installed here")
    version = importlib.metadata.version(package)
    return SourceRoot(package, f"{package} {version}", version, Path(spec.submodule_search_locations[0]))


BUILTINS: dict[str, Callable[[], list[SourceRoot]]] = {"python-source": python_source_roots}


def source_files(root: SourceRoot) -> list[SourceFile]:
    found = []
    for folder, subfolders, names in os.walk(root.path):
        subfolders[:] = [name for name in subfolders if name not in SKIP_DIRS]
        for name in names:
            if name.endswith(".py"):
                path = Path(folder, name)
                stat = path.stat()
                header = f"{root.label}/{path.relative_to(root.path).as_posix()}"
                found.append(SourceFile(header, path, stat.st_size, stat.st_mtime_ns))
    if not found:
        raise DataError(f"built-in corpus: no .py files under {root.path}")
    return sorted(found, key=lambda file: file.header)


def join_sources(files: list[SourceFile]) -> str:
    return "\n".join(f"# file: {file.header}\n{clean_text(file.path.read_bytes())}" for file in files)


def clean_text(raw: bytes) -> str:
    """A source file's bytes as corpus text: decoded, one newline convention, in the fixed vocabulary."""
    text = raw.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")
    text = _OUTSIDE_VOCAB.sub(REPLACEMENT_CHAR, text)
    return text if text.endswith("\n") else text + "\n"


# ----------------------------------------------------------------------------------------------- cache


def cache_key(name: str, roots: list[SourceRoot], files: list[SourceFile]) -> str:
    """sha256 of everything the text is built from; an edited, added or removed file changes it."""
    listing = hashlib.sha256()
    for file in files:
        listing.update(f"{file.header}\t{file.size}\t{file.mtime_ns}\n".encode())
    made_of = {
        "format": CORPUS_FORMAT,
        "name": name,
        "versions": {root.label: root.version for root in roots},
        "files": listing.hexdigest(),
    }
    return hashlib.sha256(json.dumps(made_of, sort_keys=True).encode()).hexdigest()


def _sidecar(cache_file: Path) -> Path:
    return cache_file.with_suffix(".json")


def _read_cache(cache_file: Path, key: str) -> str | None:
    """The cached text if its sidecar names this key and the text's sha256 matches it; else None."""
    try:
        meta = json.loads(_sidecar(cache_file).read_text())
        raw = cache_file.read_bytes()
    except (OSError, ValueError):
        return None
    if meta.get("key") != key or hashlib.sha256(raw).hexdigest() != meta.get("text_sha256"):
        log.warning(
            "ignoring cached built-in corpus %s: it does not match its record; rebuilding", cache_file
        )
        return None
    return raw.decode("utf-8")


def _write_cache(cache_file: Path, key: str, text: str) -> None:
    raw = text.encode("utf-8")
    meta = {"key": key, "text_sha256": hashlib.sha256(raw).hexdigest(), "chars": len(text)}
    try:  # text first: a sidecar never names a text that is not there
        write_atomically(cache_file, raw)
        write_atomically(_sidecar(cache_file), json.dumps(meta).encode())
    except OSError as err:  # a read-only cache costs a rebuild next time, not this run
        log.warning("could not cache the built-in corpus at %s: %s", cache_file, err)
