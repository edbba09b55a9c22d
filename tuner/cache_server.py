"""The search's compile caches, served from the driver's node to trials on other nodes.

A search keeps one Inductor and one Triton cache dir (tuner/search.py:trial_env, in OUT on the driver's
disk). Trials on the driver's node share them directly; a trial on another node reaches them through this
actor, pinned to the driver's node: it fetches what its node lacks before it trains and sends back what it
compiled (trainables/compile_cache.py, through trainables/trainable.py). The trials find the actor by its
name, which they are given with their inputs (tuner/runner.py:TrialInputs); without it they compile into
their node's own cache.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from model.library_env import COMPILE_CACHE_VARS
from trainables.compile_cache import ROOTS, Manifest, manifest, read_files, safe, write_files
from trainables.gate import NAMESPACE


@ray.remote(num_cpus=0, max_concurrency=8)
class CacheServer:
    """Reads and writes the driver's cache dirs for trials elsewhere; only files, matched by path."""

    def __init__(self, dirs: dict[str, str]):
        self.dirs = {root: Path(path) for root, path in dirs.items()}

    def where(self) -> tuple[str, str]:
        """This node's Ray id, and the cache it serves (a node keeps one copy of each: compile_cache.py)."""
        return ray.get_runtime_context().get_node_id(), str(self.dirs["inductor"].parent)

    def manifest(self) -> Manifest:
        return {root: manifest(path) for root, path in self.dirs.items()}

    def read(self, root: str, paths: list[str]) -> dict[str, bytes]:
        return read_files(self.dirs[root], paths)

    def missing(self, root: str, paths: list[str]) -> list[str]:
        return [rel for rel in paths if safe(rel) and not (self.dirs[root] / rel).exists()]

    def write(self, root: str, files: dict[str, bytes]) -> int:
        return write_files(self.dirs[root], files)


def server_name() -> str:
    """A name of its own for each search, so two searches on one cluster never share a server."""
    return f"compile-cache:{uuid.uuid4().hex[:12]}"


def serve(env: dict[str, str], name: str):
    """Starts the server of the cache dirs `env` gives the trials, on this (the driver's) node, under `name`,
    and returns its handle (keep it: the server lives as long as the handle), or None when `env` names no
    cache dirs. Call after Ray is up."""
    dirs = {root: env[var] for root, var in COMPILE_CACHE_VARS.items() if env.get(var)}
    if set(dirs) != set(ROOTS):
        return None
    # no mkdir here: the dirs appear with their first entry (write_files makes them), so a search that
    # fails before any trial leaves no OUT behind
    return CacheServer.options(
        name=name,
        namespace=NAMESPACE,
        scheduling_strategy=NodeAffinitySchedulingStrategy(
            ray.get_runtime_context().get_node_id(), soft=False
        ),
    ).remote(dirs)
