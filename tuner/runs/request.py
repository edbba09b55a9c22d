"""What a run asks of the cluster and takes along: the typed request a phase hands the run scheduler (its
spec, its role and the timing-gate policy the role implies), its placement (resources, concurrency, worker
reuse) and the inputs every trial gets through Ray's object store."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from optuna.storages import BaseStorage

from trainables.data import Corpus
from trainables.spec import TrialSpec
from tuner.config import Knob
from tuner.space.knobs import PLACEMENT_FIELDS
from tuner.space.sampler import VerdictsNow


class Role(str, Enum):
    """What a run is for, which says how its row is read: whether its speed is a figure the search uses, and
    whether it compiled while the screen was still filling the compile cache."""

    PROBE = "probe"  # the batch probe's two steps per candidate batch
    SPEED = "speed"  # a screen run: short, timed alone on its GPU
    BESIDE = "beside"  # the baseline's loss run, trained beside the screen in its GPU's idle time
    AHEAD = "ahead"  # a candidate's loss run, trained beside the screen ahead of the loss check
    LOSS = "loss"  # a loss-check round's run: full budget, on a GPU fraction
    REMEASURE = "remeasure"  # a finalist's or the baseline's repeat, timed alone, nothing compiling beside

    @property
    def timed(self) -> bool:
        """Whether its speed is a figure the search uses (loss runs share the machine by design)."""
        return self in (Role.SPEED, Role.REMEASURE)

    @property
    def during_screen(self) -> bool:
        """Whether it compiles while the screen fills the cache (its cache misses are expected)."""
        return self in (Role.SPEED, Role.BESIDE, Role.AHEAD)

    @property
    def timing_gate(self) -> str | None:
        """Its policy at its GPU's timing gate (trainables/training/gate.py): "turns" (its timed steps take the GPU
        in turns), "quiet" (and wait until nothing on the GPU compiles), "beside" (it yields the GPU to every
        timed window between its steps), or None (never at the gate)."""
        return _GATES.get(self)


_GATES = {Role.SPEED: "turns", Role.REMEASURE: "quiet", Role.BESIDE: "beside", Role.AHEAD: "beside"}


# A run's spec key leaves out the training settings that say where it is placed and where its files are
# (PLACEMENT_FIELDS: those declared `placement` on TrainConfig's fields), so a resume on other GPU shares or
# from another folder still finds it done. Every other setting counts, so a setting added later errs towards
# a rerun, never towards taking another config's row.
def spec_key(spec: TrialSpec, role: Role | None) -> str:
    """The identity of a run (16 hex digits): a stable hash of its training config (less PLACEMENT_FIELDS),
    its labels (case, repeat, finalist, the knobs it stands for, ...) and its role. Every ledger row carries
    its run's (TrialRow.spec_key), and --resume finds a finished run by it."""
    train = {k: v for k, v in spec.train.model_dump(warnings=False).items() if k not in PLACEMENT_FIELDS}
    identity = {"role": role.value if role else None, "train": train, "labels": asdict(spec.labels)}
    text = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


@dataclass(frozen=True)
class RunRequest:
    """One run a phase asks the run scheduler for: the trial it runs and its role (whose timing-gate policy it
    takes). A searcher's proposals share one request: the spec its knobs are laid over."""

    spec: TrialSpec
    role: Role

    @property
    def timing_gate(self) -> str | None:
        return self.role.timing_gate

    @property
    def key(self) -> str:
        return spec_key(self.spec, self.role)


@dataclass(frozen=True)
class Placement:
    """How a phase's trials take the cluster: resources per trial (a dict, or a function of the trial's
    config), at most `concurrent` at once (0: as many as fit), and warm workers reused or not. Where their
    timed windows queue is the request's (`Role.timing_gate`), not the placement's."""

    resources: dict[str, float] | Callable[[dict], dict[str, float]]
    concurrent: int = 0
    reuse_actors: bool = True
    # Whether the cluster has a place for one more of these runs now (None: not asked). A searcher that
    # proposes while there is none queues its proposal in Tune, to start later than it was judged for.
    room: Callable[[], bool] | None = None


@dataclass(frozen=True)
class TrialInputs:
    """What every trial gets through Ray's object store (tune.with_parameters), not from its node's disk."""

    corpus: Corpus | None = None  # the corpus the driver resolved (None: each trial resolves its own)
    cache_server: str | None = (
        None  # the name of the driver's compile-cache server (tuner/session/cache_server.py)
    )


@dataclass(frozen=True, kw_only=True)
class TpeSearch:
    """The searcher a phase's proposals come from, as the phase plans it (tuner/runs/tune.py:tpe_searcher
    builds it: tuner/space/sampler.py's loss-aware TPE behind tuner/space/searcher.py's Tune searcher):
    Optuna's TPE over `space`, seeded with `seed`, its first `startup_trials` proposals random, over the
    study `study` in `storage` (so a resumed search goes on with what it learned), trying `points` first,
    each finished trial constrained by what `verdicts` say of its loss then; it proposes toward the largest
    `metric`."""

    study: str
    storage: BaseStorage
    seed: int
    startup_trials: int
    space: dict[str, Knob] = field(default_factory=dict)
    points: tuple[dict[str, Any], ...] = ()
    verdicts: VerdictsNow | None = None
    metric: str = "tokens_per_s"
