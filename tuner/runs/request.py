"""What a run asks of the cluster and takes along: its placement (resources, concurrency, worker reuse,
its GPU's timing-gate policy) and the inputs every trial gets through Ray's object store."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from trainables.data import Corpus


@dataclass(frozen=True)
class Placement:
    """How a phase's trials take the cluster: resources per trial (a dict, or a function of the trial's
    config), at most `concurrent` at once (0: as many as fit), warm workers reused or not, and whether their
    timed windows queue at their GPU's gate (speed runs that share a GPU): None, "turns" or "quiet"."""

    resources: dict[str, float] | Callable[[dict], dict[str, float]]
    concurrent: int = 0
    reuse_actors: bool = True
    gate: str | None = None


@dataclass(frozen=True)
class TrialInputs:
    """What every trial gets through Ray's object store (tune.with_parameters), not from its node's disk."""

    corpus: Corpus | None = None  # the corpus the driver resolved (None: each trial resolves its own)
    cache_server: str | None = None  # the name of the driver's compile-cache server (tuner/cache_server.py)
