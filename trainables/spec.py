"""What goes into a trial: `TrialSpec`, the validated training config, where the search places it
(`TrialPlacement`) and the labels its phase gives it.

The trainable trains `spec.trained` (the training config under its placement's memory cap) and never reads
the labels; the search's ledger row is built from the spec and the run's `TrialResult`
(tuner/state/trial_rows.py), so a row comes out of the runner labelled, never patched afterwards. A run's
identity (tuner/runs/request.py:spec_key) is its training config and labels, never its placement. Ray Tune carries a trial's config as plain values (a searcher proposes its knobs as
top-level keys, which Ray's tables show): `as_tune` and `of_tune` are the one conversion each way.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from trainables.config import ConfigError, TrainConfig, make_config

TRAIN = "train"  # the Tune config's key of the training config; every other top-level key is a knob
LABELS = "_labels"  # the key under TRAIN where the labels travel; not a knob
PLACEMENT = "_placement"  # the key under TRAIN where the placement travels; not a knob


@dataclass(frozen=True, kw_only=True)
class TrialLabels:
    """What the phase says of a trial, for its row (TrialRow fields of the same names)."""

    knobs: dict[str, Any] = field(default_factory=dict)  # the row's `config`: the knobs it stands for
    case: int | None = None  # index of its config in the phase's cases (the runner sets it, with repeat)
    repeat: int | None = None
    screen_id: str | None = None  # a loss run: the screen trial it checks
    twin_of: str | None = None  # a loss run: the screen trial whose execution it trains with
    finalist: str | None = None  # a re-measure run: the finalist it times
    execution: dict[str, Any] | None = None  # a loss run: the speed-only knobs it trains with


@dataclass(frozen=True)
class TrialPlacement:
    """Where the search places a trial, apart from what it trains (tuner/runs/placement.py decides it):
    `gpu_share`, its fraction of a GPU, is Ray's `num_gpus` for it and its memory cap (None: the placement
    of its phase decides, uncapped)."""

    gpu_share: float | None = None

    def __post_init__(self) -> None:
        if self.gpu_share is not None and not 0 < self.gpu_share <= 1:
            raise ConfigError(f"a trial's gpu_share must be in (0, 1], not {self.gpu_share}")


@dataclass(frozen=True)
class TrialSpec:
    """One trial: the training config it trains, where it is placed and its phase's labels."""

    train: TrainConfig
    placement: TrialPlacement = TrialPlacement()
    labels: TrialLabels = TrialLabels()

    @classmethod
    def of(cls, train: dict[str, Any], **labels: Any) -> TrialSpec:
        """A spec from a training config as a search writes it (ConfigError on bad values)."""
        return cls(make_config(train, section="train"), labels=TrialLabels(**labels))

    @property
    def trained(self) -> TrainConfig:
        """The config the trial trains: `train` with its GPU share as its memory cap (`gpu_memory_fraction`,
        the run's own setting, which the loop enforces) where it has one."""
        share = self.placement.gpu_share
        return self.train if share is None else self.train.model_copy(update={"gpu_memory_fraction": share})

    def with_train(self, **values: Any) -> TrialSpec:
        """This spec with some training settings changed (ConfigError on bad values)."""
        return replace(self, train=make_config({**self.train.model_dump(), **values}, section="train"))

    def labelled(self, **labels: Any) -> TrialSpec:
        return replace(self, labels=replace(self.labels, **labels))

    def with_placement(self, **placement: Any) -> TrialSpec:
        """This spec placed otherwise (ConfigError on a bad share)."""
        return replace(self, placement=replace(self.placement, **placement))

    def as_tune(self) -> dict[str, Any]:
        """The Tune config that carries this spec (JSON-ready: Ray writes it to the trial's params.json)."""
        extra = {LABELS: asdict(self.labels), PLACEMENT: asdict(self.placement)}
        return {TRAIN: {**self.train.model_dump(), **extra}}

    @classmethod
    def of_tune(cls, config: dict[str, Any]) -> TrialSpec:
        """The spec a Tune config carries: the training config under TRAIN with a searcher's knobs (the other
        top-level keys) over it, those knobs being what it stands for. ConfigError on bad values."""
        train, placement, labels, knobs = _parts(config)
        return cls(make_config({**train, **knobs}, section="train"), placement, labels)

    @classmethod
    def as_asked(cls, config: dict[str, Any]) -> TrialSpec:
        """`of_tune` without validation: a config the trial refused (ConfigError) is still recorded as asked."""
        train, placement, labels, knobs = _parts(config)
        return cls(TrainConfig.model_construct(**{**train, **knobs}), placement, labels)


def _parts(config: dict[str, Any]) -> tuple[dict[str, Any], TrialPlacement, TrialLabels, dict[str, Any]]:
    train = dict(config.get(TRAIN) or {})
    labels = TrialLabels(**(train.pop(LABELS, None) or {}))
    placement = TrialPlacement(**(train.pop(PLACEMENT, None) or {}))
    knobs = {k: v for k, v in config.items() if k != TRAIN}
    return train, placement, replace(labels, knobs=knobs) if knobs else labels, knobs
