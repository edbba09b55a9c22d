"""A search's compile caches on a node other than its driver's: what the node lacks comes from the driver,
what it compiled goes back, so no node compiles cold what another already paid for, and no storage is shared.

The driver keeps the search's cache root (below) and serves it (tuner/session/cache_server.py, an actor on the
driver's node). A trial on another node trains against a cache
dir of that node (`node_cache_root`), shared by the node's trials as OUT's is by the driver node's: before
training it fetches the files the node lacks (`NodeCache.pull`), after it sends back those the driver lacks
(`NodeCache.push`). Both are bounded (`HYBRID_TUNER_CACHE_SYNC_MB` per direction, in batches of at most
`BATCH_BYTES`) and never fail a trial: a sync that fails leaves a one-line notice and the run compiles
what it lacks, as it would cold.

Ray-free: the trainable hands `NodeCache` a `Driver` whose calls go through Ray (trainables/trainable.py).
Files are matched by their path in the cache dir: Inductor and Triton name their entries by content hash.

A cache root outlives a search (by default the user's cache dir: `default_root`) and holds one subdir per
`CacheKey` (the device and the versions of torch, Triton, the kernels and Python), each with its own
Inductor and Triton dirs and a key.json saying what it stands for: a run on another GPU or with other
software uses another subdir and never reads an entry it cannot use. The key is computed where the run
executes (`CacheKey.here`): a driver may have no GPU. Between nodes only the trial's own key is synced.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

import torch

from model.library_env import COMPILE_CACHE_VARS
from model.ops import tuning
from trainables.common.errors import first_line
from trainables.common.files import corpus_cache_dir, write_atomically

ROOTS = tuple(COMPILE_CACHE_VARS)  # the dirs of a compile cache, as `TrainConfig.compile_cache` lays them out
BATCH_BYTES = 64 << 20  # the most one call moves through Ray's object store
LIMIT_VAR = "HYBRID_TUNER_CACHE_SYNC_MB"  # the most a trial moves each way
DEFAULT_LIMIT_MB = 2048
NODE_CACHE_VAR = "HYBRID_TUNER_NODE_CACHE"  # where a node keeps the caches it got (default: its temp dir)
KEY_FILE = "key.json"  # beside a key's cache dirs: what its name stands for
# The distributions whose versions decide what a compiled graph or a Triton kernel is (the kernels: their
# sources are in the Triton cache keys, their custom ops in the graphs).
KEYED_ON = ("torch", "triton", "fla-core", "flash-linear-attention", "mamba-ssm", "causal-conv1d")

Manifest = dict[str, dict[str, int]]  # root -> path in it -> size in bytes


class Driver(Protocol):
    """The driver's cache, as a trial on another node reaches it."""

    def manifest(self) -> Manifest: ...
    def read(self, root: str, paths: list[str]) -> dict[str, bytes]: ...
    def missing(self, root: str, paths: list[str]) -> list[str]: ...
    def write(self, root: str, files: dict[str, bytes]) -> int: ...


@dataclass(frozen=True)
class CacheKey:
    """What a compiled entry is valid for: the device it was compiled for and the software that compiled it.
    Its `name` (a readable device part and a hash of the whole) names the subdir of a cache root."""

    device: str  # "NVIDIA H100 80GB HBM3 sm_90", or "cpu x86_64"
    versions: dict[str, str | None] = field(default_factory=dict)  # distribution -> version (None: absent)
    python: str = f"{sys.version_info.major}.{sys.version_info.minor}"

    @classmethod
    def here(cls, device: str = "auto") -> CacheKey:
        """The key of a run on `device` (a TrainConfig's: auto, cpu, cuda, cuda:N) in this process."""
        return cls(device=device_label(device), versions=installed_versions())

    def as_json(self) -> dict:
        return asdict(self)

    @property
    def name(self) -> str:
        digest = hashlib.sha256(json.dumps(self.as_json(), sort_keys=True).encode()).hexdigest()[:12]
        slug = re.sub(r"[^a-z0-9]+", "-", self.device.lower()).strip("-")[:40]
        return f"{slug}-{digest}"


def installed_versions() -> dict[str, str | None]:
    return tuning.installed_versions(KEYED_ON)


def device_label(device: str) -> str:
    """The GPU's name and compute capability, or the CPU's architecture, for a TrainConfig's `device`."""
    kind = torch.device("cuda" if device == "auto" else device).type
    if kind == "cuda" and torch.cuda.is_available():
        index = torch.device(device).index if device not in ("auto", "cuda") else None
        index = torch.cuda.current_device() if index is None else index
        major, minor = torch.cuda.get_device_capability(index)
        return f"{torch.cuda.get_device_name(index)} sm_{major}{minor}"
    if kind == "cuda":
        kind = "cpu"  # auto without CUDA; a run that asked for CUDA fails before it compiles
    return f"{kind} {platform.machine()}"


def keyed_dirs(root: Path, key: CacheKey) -> dict[str, Path]:
    """A root's Inductor and Triton dirs for `key`, by dir name."""
    return {name: root / key.name / name for name in ROOTS}


def record_key(root: Path, key: CacheKey) -> None:
    """Writes key.json beside `key`'s dirs, once (atomically: runs starting together may both write it)."""
    where = root / key.name / KEY_FILE
    if where.exists():
        return
    where.parent.mkdir(parents=True, exist_ok=True)
    write_files(root / key.name, {KEY_FILE: json.dumps(key.as_json(), indent=1).encode()})


def default_root() -> Path:
    """Where compile caches live unless told otherwise: the project's user cache dir (the corpus's too:
    platformdirs, or TUNER_CACHE_DIR), in compile/."""
    return corpus_cache_dir() / "compile"


def usable_root(root: Path) -> Path:
    """`root`, or where it cannot be made or written (a node of a cluster that lacks the driver's path), a
    root in this node's temp dir: the run compiles into a cache of its own rather than fail."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        if os.access(root, os.W_OK):
            return root
    except OSError:
        pass
    return Path(tempfile.gettempdir()) / "hybrid-tuner-compile-cache"


def _kept(rel: str) -> bool:
    """Entries, not the locks and half-written temp files Inductor and Triton leave beside them."""
    parts = rel.split("/")
    name = parts[-1]
    return (
        "locks" not in parts[:-1]
        and not name.endswith(".lock")
        and ".tmp" not in name
        and not name.startswith(".")
    )


def safe(rel: str) -> bool:
    """A path that stays inside its cache dir."""
    parts = rel.split("/")
    return bool(rel) and not rel.startswith("/") and all(p not in ("", ".", "..") for p in parts)


def manifest(root: Path) -> dict[str, int]:
    """Each cache file under `root` (path relative to it, `/`-separated): its size."""
    out: dict[str, int] = {}
    if not root.is_dir():
        return out
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            if _kept(rel):
                try:
                    out[rel] = path.stat().st_size
                except OSError:  # removed meanwhile
                    continue
    return out


def read_files(root: Path, paths: Iterable[str]) -> dict[str, bytes]:
    """The bytes of each of `paths` under `root` that is there and safe (others are left out)."""
    out = {}
    for rel in paths:
        if safe(rel):
            try:
                out[rel] = (root / rel).read_bytes()
            except OSError:
                continue
    return out


def write_files(root: Path, files: dict[str, bytes]) -> int:
    """Writes each file that `root` lacks, atomically (a reader never sees half a file; two writers of one
    entry both write its one content); returns how many it wrote."""
    written = 0
    for rel, data in files.items():
        dest = root / rel
        if not safe(rel) or dest.exists():
            continue
        write_atomically(dest, data)
        written += 1
    return written


def batches(sizes: dict[str, int], limit: int) -> tuple[list[list[str]], int]:
    """`sizes`' paths in batches of at most BATCH_BYTES (one file over it alone), at most `limit` bytes in all
    (smallest first, so a limit keeps the most entries); and how many files the limit left out."""
    out: list[list[str]] = []
    batch: list[str] = []
    batch_bytes = total = left = 0
    for rel, size in sorted(sizes.items(), key=lambda kv: (kv[1], kv[0])):
        if total + size > limit:
            left += 1
            continue
        if batch and batch_bytes + size > BATCH_BYTES:
            out.append(batch)
            batch, batch_bytes = [], 0
        batch.append(rel)
        batch_bytes += size
        total += size
    if batch:
        out.append(batch)
    return out, left


def limit_bytes() -> int:
    try:
        return max(0, int(float(os.environ.get(LIMIT_VAR, DEFAULT_LIMIT_MB)) * (1 << 20)))
    except ValueError:
        return DEFAULT_LIMIT_MB << 20


def node_cache_root(driver_cache: str) -> Path:
    """This node's copy of a search's caches: one per driver cache dir (a resumed search finds the node's
    copy again), under `HYBRID_TUNER_NODE_CACHE` or the node's temp dir."""
    base = os.environ.get(NODE_CACHE_VAR) or str(Path(tempfile.gettempdir()) / "hybrid-tuner-compile-cache")
    key = hashlib.sha256(driver_cache.encode()).hexdigest()[:16]
    return Path(base) / key


def _mb(n: int) -> str:
    return f"{n / (1 << 20):.1f} MB"


class NodeCache:
    """A node's copy of the driver's compile caches, for one trial: `pull` before it trains, `push` after.
    Each returns a one-line account; neither raises."""

    def __init__(self, driver: Driver, local: Path, key: CacheKey | None = None):
        self.driver = driver
        self.local = local  # a cache root, as the driver's: the run keys it as the loop does
        self.key = key or CacheKey.here()  # the node's: only its entries are worth moving
        self.known: dict[str, set[str]] = {root: set() for root in self.dirs()}  # what the driver holds

    def dirs(self) -> dict[str, Path]:
        """This key's dirs, by their path in a cache root ("<key>/inductor"), as the driver names them."""
        return {f"{self.key.name}/{name}": path for name, path in keyed_dirs(self.local, self.key).items()}

    def pull(self) -> str:
        try:
            files, size, left = self._pull()
        except Exception as err:  # noqa: BLE001 - a failed sync costs a cold compile, never the trial
            why = f"{type(err).__name__}: {first_line(err)[:160]}"
            return f"compile cache: not fetched from the driver ({why}); compiling what this node lacks"
        extra = f"; {left} files over the {_mb(limit_bytes())} limit left out" if left else ""
        return f"compile cache: fetched {files} files ({_mb(size)}) from the driver into {self.local}{extra}"

    def _pull(self) -> tuple[int, int, int]:
        theirs = self.driver.manifest()
        files = size = left_out = 0
        budget = limit_bytes()
        for root, dest in self.dirs().items():
            listed = theirs.get(root, {})
            self.known[root] = set(listed)
            mine = manifest(dest)
            wanted = {rel: n for rel, n in listed.items() if rel not in mine and safe(rel)}
            groups, left = batches(wanted, budget - size)
            left_out += left
            for group in groups:
                got = self.driver.read(root, group)
                write_files(dest, got)
                files += len(got)
                size += sum(len(b) for b in got.values())
        return files, size, left_out

    def push(self) -> str:
        try:
            files, size, left = self._push()
        except Exception as err:  # noqa: BLE001 - what the driver misses, a later trial compiles again
            why = f"{type(err).__name__}: {first_line(err)[:160]}"
            return f"compile cache: not sent back to the driver ({why})"
        extra = f"; {left} files over the {_mb(limit_bytes())} limit kept here" if left else ""
        return f"compile cache: sent {files} new files ({_mb(size)}) back to the driver{extra}"

    def _push(self) -> tuple[int, int, int]:
        files = size = left_out = 0
        budget = limit_bytes()
        for root, src in self.dirs().items():
            mine = {rel: n for rel, n in manifest(src).items() if rel not in self.known[root]}
            if not mine:
                continue
            lacking = set(self.driver.missing(root, sorted(mine)))
            groups, left = batches({rel: mine[rel] for rel in lacking}, budget - size)
            left_out += left
            for group in groups:
                data = read_files(src, group)
                self.driver.write(root, data)
                files += len(data)
                size += sum(len(b) for b in data.values())
        if files:  # the driver's root says what the key stands for, also where it never ran this key
            self.driver.write(self.key.name, {KEY_FILE: json.dumps(self.key.as_json(), indent=1).encode()})
        return files, size, left_out
