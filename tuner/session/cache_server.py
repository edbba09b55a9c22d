"""The search's compile caches, served from the driver's node to trials on other nodes.

A search keeps its compile caches in one cache root (tuner/search.py:trial_env: the user's cache dir, or
--cache-dir), one subdir per cache key (trainables/training/compile_cache.py:CacheKey: device and software). Trials on
the driver's node use it directly; a trial on another node reaches it through this actor, pinned to the
driver's node: it fetches what its node lacks of its own key before it trains and sends back what it compiled
(trainables/training/compile_cache.py, through trainables/trainable.py). The trials find the actor by its name,
which they are given with their inputs (tuner/runs/request.py:TrialInputs); without it they compile into their
node's own cache.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from model import library_env
from trainables.training.compile_cache import ROOTS, Manifest, manifest, read_files, safe, write_files
from trainables.training.gate import NAMESPACE


# Ray's typing of ray.remote(...) lists the task options only, not an actor's (max_concurrency)
@ray.remote(num_cpus=0, max_concurrency=8)  # type: ignore[call-overload]
class CacheServer:
    """Reads and writes the driver's cache root for trials elsewhere; only files, matched by path. A dir is
    named by its path in the root ("<key>/inductor"), as NodeCache names it."""

    def __init__(self, root: str):
        self.root = Path(root)

    def where(self) -> tuple[str, str]:
        """This node's Ray id, and the cache it serves (a node keeps one copy of each: compile_cache.py)."""
        return ray.get_runtime_context().get_node_id(), str(self.root)

    def manifest(self) -> Manifest:
        """Every key's dirs: a trial takes its own key's."""
        keys = sorted(p.name for p in self.root.iterdir() if p.is_dir()) if self.root.is_dir() else []
        return {f"{key}/{name}": manifest(self.root / key / name) for key in keys for name in ROOTS}

    def _dir(self, rel: str) -> Path:
        if not safe(rel):
            raise ValueError(f"not a dir of the cache root: {rel!r}")
        return self.root / rel

    def read(self, root: str, paths: list[str]) -> dict[str, bytes]:
        return read_files(self._dir(root), paths)

    def missing(self, root: str, paths: list[str]) -> list[str]:
        return [rel for rel in paths if safe(rel) and not (self._dir(root) / rel).exists()]

    def write(self, root: str, files: dict[str, bytes]) -> int:
        return write_files(self._dir(root), files)


def server_name() -> str:
    """A name of its own for each search, so two searches on one cluster never share a server."""
    return f"compile-cache:{uuid.uuid4().hex[:12]}"


def serve(env: dict[str, str], name: str):
    """Starts the server of the cache root `env` gives the trials, on this (the driver's) node, under `name`,
    and returns its handle (keep it: the server lives as long as the handle), or None when the trials use
    cache dirs the user exported (theirs to share: on a cluster, typically shared storage). Call after Ray
    is up."""
    root = env.get(library_env.COMPILE_CACHE_VAR)
    if not root:
        return None
    # no mkdir here: the dirs appear with their first entry (write_files makes them)
    # mypy keeps a decorated class's own type: @ray.remote made CacheServer an ActorClass, which has options
    return CacheServer.options(  # type: ignore[attr-defined]
        name=name,
        namespace=NAMESPACE,
        scheduling_strategy=NodeAffinitySchedulingStrategy(
            ray.get_runtime_context().get_node_id(), soft=False
        ),
    ).remote(root)
