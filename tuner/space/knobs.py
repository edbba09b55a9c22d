"""Which knobs change what is trained and which only how it runs: the split the loss limit rests on.

A knob missing from a config has the baseline's value. Two configs with the same `loss_key` train the same
model to the same loss (up to float noise), so one loss run stands for both.
"""

from __future__ import annotations

from typing import Any

from trainables.config import TrainConfig
from trainables.config_fields import KnobClass

# Every list below is derived from the class each TrainConfig field declares (trainables/config.py).
CLASSES: dict[str, KnobClass | None] = TrainConfig.knob_classes()


def _of_kind(kind: str) -> frozenset[str]:
    return frozenset(name for name, c in CLASSES.items() if c and c.kind == kind)


# Knobs that change speed but not the loss curve (up to float noise): one loss run stands for every
# config that differs from it only in these.
SPEED_ONLY_KNOBS = _of_kind("execution")
# Fields that neither change the loss at the full token budget nor are searched: bookkeeping, memory caps,
# and `max_steps` (speed screens cut runs short; the loss is judged at the full budget).
RUN_ONLY_FIELDS = _of_kind("run")
# Where a run is placed and where its files go, not what it trains or measures (a run's identity leaves them out)
PLACEMENT_FIELDS = frozenset(name for name, c in CLASSES.items() if c and c.placement)
# Fields whose values run only on some hardware: the space drops those values elsewhere (tuner/space/domains.py).
HARDWARE_KNOBS = {name: c for name, c in CLASSES.items() if c and c.needs}


def is_loss_knob(name: str) -> bool:
    return name not in SPEED_ONLY_KNOBS and name not in RUN_ONLY_FIELDS


def freeze(value: Any) -> Any:
    """A hashable, order-independent stand-in for nested config values (model overrides are dicts)."""
    if isinstance(value, dict):
        return tuple(sorted((k, freeze(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value


# The knobs whose values matter to the loss only through the peak lr they give (TrainConfig.peak_lr: lr scaled
# by lr_scaling from lr_base_batch to the effective batch): at the baseline's batch, lr_scaling sqrt and none
# train the same numbers, and one loss run stands for both (issue 43: batch-64 bf16 under each was its own key).
LR_LABELS = frozenset({"lr", "lr_scaling", "lr_base_batch"})
PEAK_LR_DIGITS = 12  # peak lrs equal to this many significant digits are one lr (sqrt(4) * 1e-3 vs 2e-3)


def loss_key(config: dict, baseline: dict) -> tuple:
    """The values of the loss-relevant knobs, with lr, lr_scaling and lr_base_batch as the one peak lr they
    give; equal keys mean one loss run stands for both configs."""
    names = sorted(n for n in set(config) | set(baseline) if is_loss_knob(n) and n not in LR_LABELS)
    return (*_values(config, baseline, names), ("peak_lr", peak_lr(config, baseline)))


def peak_lr(config: dict, baseline: dict) -> float:
    """The peak lr the config trains at (TrainConfig.peak_lr), the baseline's values (or TrainConfig's
    defaults) where the config does not set them."""
    fields = ("lr", "lr_scaling", "lr_base_batch", "batch_size", "grad_accum")
    values = {n: config[n] if n in config else baseline[n] for n in fields if n in config or n in baseline}
    return float(f"{TrainConfig.model_construct(**values).peak_lr():.{PEAK_LR_DIGITS}g}")


def train_point(config: dict, baseline: dict) -> tuple[int, float]:
    """(effective batch, peak lr): where a config sits among what is trained, whatever its execution and
    precision (the loss check spreads its candidates over these)."""
    values = {n: config.get(n, baseline.get(n)) for n in ("batch_size", "grad_accum")}
    made = TrainConfig.model_construct(**{n: v for n, v in values.items() if v is not None})
    return made.batch_size * made.grad_accum, peak_lr(config, baseline)


# TrainConfig fields that change the graph torch.compile builds (shapes, dtypes, modules, mode): two configs
# equal in these compile the same graph, so the second finds it in the search's compile cache.
GRAPH_FIELDS = tuple(name for name, c in CLASSES.items() if c and c.graph)


def graph_key(config: dict, baseline: dict) -> tuple:
    """Equal keys: the same compiled graph, whatever the loader, lr or optimizer settings."""
    return _values(config, baseline, GRAPH_FIELDS)


def _values(config: dict, baseline: dict, names) -> tuple:
    """(name, value) of each of `names`, the baseline's value where the config does not set it."""
    return tuple((n, freeze(config[n] if n in config else baseline.get(n))) for n in names)


def knob_diff(config: dict, baseline: dict) -> dict[str, tuple[Any, Any]]:
    """{knob: (baseline value, config value)} for every knob of `config` that differs from the baseline."""
    return {
        name: (baseline.get(name), value)
        for name, value in config.items()
        if freeze(value) != freeze(baseline.get(name))
    }


def execution(train: dict[str, Any]) -> dict[str, Any]:
    """The speed-only knobs of a full training config: how it ran, as opposed to what it trained."""
    return {name: train[name] for name in sorted(SPEED_ONLY_KNOBS) if name in train}
