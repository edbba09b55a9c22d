"""The Ray Tune function trainable: a thin wrapper that runs the training loop and reports its metrics.

The tuner passes a `TrialSpec` (trainables/spec.py) as Tune's plain config, read back by `TrialSpec.of_tune`:
the training config, a searcher's knobs as top-level keys (so they show in Ray's tables and the dashboard),
the trial's placement (its GPU share: the loop's memory cap, `TrialSpec.trained`) and the phase's labels,
which the trainable never reads; it needs nothing from the tuner. Interim reports let Ray stop clearly slow
trials; the last report carries the run's full result, a `TrialResult` as its metrics dict (status,
speed, loss, memory, telemetry window: trainables/training/result.py).
The search hands every trial the corpus its driver resolved (`corpus`, through Ray's object store), so a
node of a cluster needs no copy of the data, and no share of OUT: a trial on a node other than the
driver's trains against its node's copy of the search's compile caches, fetched from the driver before it
trains and sent back after (`_follow_driver_caches`, trainables/training/compile_cache.py).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import ray
import torch
from ray import tune

from model import library_env
from trainables.common.progress import log
from trainables.config import ConfigError, TrainConfig
from trainables.data import Corpus, shipped_corpus
from trainables.spec import TrialSpec
from trainables.training.compile_cache import Manifest, NodeCache, node_cache_root
from trainables.training.gate import NAMESPACE, BesideClient, GateClient
from trainables.training.loop import train
from trainables.training.result import INTERIM_FIELDS, TrialResult

SYNC_TIMEOUT_S = 300.0  # one call of a cache sync; one that takes longer is a failed sync


class _DriverCache:
    """The driver's cache server, reached through Ray (the `Driver` of trainables/training/compile_cache.py)."""

    def __init__(self, actor):
        self.actor = actor

    def _get(self, ref):
        return ray.get(ref, timeout=SYNC_TIMEOUT_S)

    def manifest(self) -> Manifest:
        return self._get(self.actor.manifest.remote())

    def read(self, root: str, paths: list[str]) -> dict[str, bytes]:
        return self._get(self.actor.read.remote(root, paths))

    def missing(self, root: str, paths: list[str]) -> list[str]:
        return self._get(self.actor.missing.remote(root, paths))

    def write(self, root: str, files: dict[str, bytes]) -> int:
        return self._get(self.actor.write.remote(root, files))


def _follow_driver_caches(node_id: str, name: str | None) -> tuple[NodeCache | None, str | None]:
    """On a node other than the driver's, this node's copy of the search's compile caches, from the server
    named `name` (None on the driver's node, or where no server was started), and a notice when the server
    cannot be reached."""
    if not name:
        return None, None
    try:
        actor = ray.get_actor(name, namespace=NAMESPACE)
        driver_node, driver_cache = ray.get(actor.where.remote(), timeout=SYNC_TIMEOUT_S)
    except Exception as err:  # noqa: BLE001 - without the driver's caches the run compiles cold, never fails
        return None, f"compile cache: the driver's is out of reach ({type(err).__name__}); compiling cold"
    if driver_node == node_id:
        return None, None  # the driver's own node: the search's caches are right here
    return NodeCache(_DriverCache(actor), node_cache_root(driver_cache)), None


def _own_compile_caches() -> None:
    """The search's compile caches are in OUT, which a node of a cluster may lack and not be allowed to
    create: such a node compiles into a cache of its own (under its temp dir) rather than fail its trials."""
    fallback = Path(tempfile.gettempdir()) / "hybrid-tuner-compile-cache"
    dirs = library_env.compile_cache_dirs()  # the search's, from the trials' runtime env
    library_env.point_compile_caches(
        {root: fallback / Path(path).name for root, path in dirs.items() if not _writable(Path(path))}
    )


def _writable(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(path, os.W_OK)


def _placement() -> dict[str, Any]:
    """Where this trial runs, in the ids the telemetry actor uses (Ray node id, physical GPU index)."""
    ctx = ray.get_runtime_context()
    gpu_ids = ray.get_gpu_ids()
    return {"node_id": ctx.get_node_id(), "gpu": int(gpu_ids[0]) if gpu_ids else None}


def train_trial(
    config: dict[str, Any],
    timing_gate: str | None = None,
    corpus: Corpus | None = None,
    cache_server: str | None = None,
) -> None:
    """One trial. With `timing_gate` (speed runs that share a GPU: "turns", or "quiet" to also wait until
    no other run on the GPU is compiling), its GPU work after the first step waits for the GPU's gate, so no
    two trials on one GPU are ever timed at once (trainables/training/gate.py). `corpus`: the driver's, trained on
    when the config is pinned to its sha256 (trainables/data/__init__.py:shipped_corpus). `cache_server`: the name of
    the driver's compile-cache server, for a trial on another node (`_follow_driver_caches`)."""
    placement = _placement()
    try:
        cfg = TrialSpec.of_tune(config).trained  # capped at its GPU share, where the search placed it on one
    except ConfigError as err:
        tune.report({"status": "error", "error": str(err), "tokens_per_s": 0.0, "done": True, **placement})
        return
    # Where it runs, at once: a trial lost with its node before its first step (a compile takes minutes)
    # is still known to have run there, and is rerun rather than blamed.
    tune.report({"status": "running", "tokens_per_s": 0.0, **placement})

    def interim(metrics: dict[str, Any]) -> None:
        if not metrics.get("done"):
            tune.report(
                {
                    "status": "running",
                    "tokens": metrics.get("tokens"),
                    **{k: metrics.get(k) for k in INTERIM_FIELDS},
                    "tokens_per_s": metrics.get("tokens_per_s") or 0.0,
                    **placement,
                }
            )

    gate = None
    if timing_gate and placement["gpu"] is not None:
        who = tune.get_context().get_trial_id()
        gate = GateClient(placement["node_id"], placement["gpu"], who, quiet=timing_gate == "quiet")
    result = _train(cfg, placement, corpus, cache_server, report=interim, gate=gate)
    tune.report({**result.metrics(), "done": True})


def run_beside(
    spec: TrialSpec, who: str, corpus: Corpus | None = None, cache_server: str | None = None
) -> dict[str, Any]:
    """A run that is no Tune trial, started by the driver as a Ray task: a full-budget loss run trained
    beside the screen's speed runs in its GPU's idle time, giving the GPU to every timed window
    (trainables/training/gate.py:BesideClient). Returns its TrialResult's metrics, as a trial's last report."""
    placement = _placement()
    hook = None
    if placement["gpu"] is not None:
        hook = BesideClient(placement["node_id"], placement["gpu"], who, sync=_finish_gpu_work)
    return _train(spec.trained, placement, corpus, cache_server, hook=hook).metrics()


def _finish_gpu_work() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _train(
    cfg: TrainConfig,
    placement: dict[str, Any],
    corpus: Corpus | None,
    cache_server: str | None,
    *,
    report=None,
    gate: GateClient | None = None,
    hook: BesideClient | None = None,
) -> TrialResult:
    """The run, against the search's compile caches (this node's copy of them off the driver's node), with
    its GPU's gate held around its timed steps (`gate`) or asked between steps (`hook`)."""
    node_cache, notice = _follow_driver_caches(placement["node_id"], cache_server)
    notices = [notice] if notice else []
    if not node_cache:
        _own_compile_caches()
    else:
        cfg = cfg.model_copy(update={"compile_cache": str(node_cache.local)})
        notices.append(node_cache.pull())
    client = gate or hook
    try:
        with shipped_corpus(corpus):
            run = train(cfg, report=report, timing_gate=gate, step_hook=hook)
    finally:
        if client:
            client.close()
        if node_cache:
            notices.append(node_cache.push())
        for line in notices:
            log(line)  # the trial's worker log
    result = TrialResult.of(
        run,
        node_id=placement["node_id"],
        gpu=placement["gpu"] if placement["gpu"] is not None else run.gpu,  # Ray's GPU id, as telemetry's
        cache_sync="; ".join(notices) or None,
        gate_wait_s=round(client.waited_s, 3) if client else None,
        compiling_beside=gate.compiling_beside if gate else None,  # only a timed run counts them
    )
    if result.status != "ok":
        result = replace(result, tokens_per_s=0.0)  # a failed run: 0 tok/s, so the search avoids its region
    return result
