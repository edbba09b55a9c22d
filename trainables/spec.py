"""What goes into a trial: `TrialSpec`, the validated training config plus the labels its phase gives it.

The trainable trains `spec.train` and never reads the labels; the search's ledger row is built from the
spec and the run's `TrialResult` (tuner/state/trial_rows.py), so a row comes out of the runner labelled, never
patched afterwards. Ray Tune carries a trial's config as plain values (a searcher proposes its knobs as
top-level keys, which Ray's tables show): `as_tune` and `of_tune` are the one conversion each way.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from trainables.config import TrainConfig, make_config

TRAIN = "train"  # the Tune config's key of the training config; every other top-level key is a knob
LABELS = "_labels"  # the key under TRAIN where the labels travel; not a knob


@dataclass(frozen=True)
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
class TrialSpec:
    """One trial: the training config it trains and its phase's labels."""

    train: TrainConfig
    labels: TrialLabels = TrialLabels()

    @classmethod
    def of(cls, train: dict[str, Any], **labels: Any) -> TrialSpec:
        """A spec from a training config as a search writes it (ConfigError on bad values)."""
        return cls(make_config(train, section="train"), TrialLabels(**labels))

    def with_train(self, **values: Any) -> TrialSpec:
        """This spec with some training settings changed (ConfigError on bad values)."""
        return replace(self, train=make_config({**self.train.model_dump(), **values}, section="train"))

    def labelled(self, **labels: Any) -> TrialSpec:
        return replace(self, labels=replace(self.labels, **labels))

    def as_tune(self) -> dict[str, Any]:
        """The Tune config that carries this spec (JSON-ready: Ray writes it to the trial's params.json)."""
        return {TRAIN: {**self.train.model_dump(), LABELS: asdict(self.labels)}}

    @classmethod
    def of_tune(cls, config: dict[str, Any]) -> TrialSpec:
        """The spec a Tune config carries: the training config under TRAIN with a searcher's knobs (the other
        top-level keys) over it, those knobs being what it stands for. ConfigError on bad values."""
        train, labels, knobs = _parts(config)
        return cls(make_config({**train, **knobs}, section="train"), labels)

    @classmethod
    def as_asked(cls, config: dict[str, Any]) -> TrialSpec:
        """`of_tune` without validation: a config the trial refused (ConfigError) is still recorded as asked."""
        train, labels, knobs = _parts(config)
        return cls(TrainConfig.model_construct(**{**train, **knobs}), labels)


def _parts(config: dict[str, Any]) -> tuple[dict[str, Any], TrialLabels, dict[str, Any]]:
    train = dict(config.get(TRAIN) or {})
    labels = TrialLabels(**(train.pop(LABELS, None) or {}))
    knobs = {k: v for k, v in config.items() if k != TRAIN}
    return train, replace(labels, knobs=knobs) if knobs else labels, knobs
