"""What bench/oracle.py trains: the search's space as it runs on this machine, its points (the values of the
knobs that change the step count or the lr) and the stated sample at each point.

The space is the search's own (tuner/space: the recipe's knobs joined to it, the values this hardware cannot
run dropped by `applicable`, saying why), so the oracle judges the answer over what the search could pick.
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass
from typing import Any

from trainables.config import ConfigError, TrainConfig
from tuner.config import NOT_KNOBS, Range, SearchConfig
from tuner.space.domains import applicable
from tuner.space.knobs import train_point
from tuner.space.recipe import in_space, recipe_point

# The knobs that change the step count or the lr: each distinct (effective batch, peak lr) they give is a
# point, trained once at the point execution before any config of the sample is trained there.
POINT_KNOBS = ("batch_size", "grad_accum", "lr", "lr_scaling")
DEFAULT_KNOBS = "precision,compile,fused_adamw"


@dataclass(frozen=True)
class FittedSpace:
    """The search's space on this hardware: list knobs (a knob left one value holds it alone), ranges, the
    values dropped and why, and the recipe as it runs here (the points' execution)."""

    choices: dict[str, list[Any]]
    ranges: dict[str, Range]
    dropped: list[str]
    execution: dict[str, Any]


def fitted_space(cfg: SearchConfig, hardware: dict[str, Any]) -> FittedSpace:
    """The space the search would search here (tuner/pipeline.py:fit_to_hardware does the same)."""
    offered = in_space(cfg.search.space, cfg.search.recipe, cfg.train, bool(hardware.get("cuda")))
    space, fixed, dropped = applicable(offered, hardware)
    choices = {k: list(v) for k, v in space.items() if not isinstance(v, Range)}
    choices.update({k: [v] for k, v in fixed.items()})
    ranges = {k: v for k, v in space.items() if isinstance(v, Range)}
    return FittedSpace(choices, ranges, dropped, recipe_point(space, cfg.search.recipe))


def knob_values(names: list[str], space: FittedSpace, base: TrainConfig) -> dict[str, list[Any]]:
    """The values each of --knobs takes here: the space's choices, or the baseline's value where the space
    (on this hardware, for this workload) has none. ConfigError for a name that is not a knob of a product."""
    values: dict[str, list[Any]] = {}
    for name in names:
        if name not in TrainConfig.model_fields or name in NOT_KNOBS:
            raise ConfigError(
                f"--knobs: unknown knob {name!r} (a knob is a train key, e.g. precision, compile)"
            )
        if name in POINT_KNOBS:
            raise ConfigError(f"--knobs: {name} is a point knob (the points cover it; --points narrows them)")
        if name in space.ranges:
            raise ConfigError(f"--knobs: {name} is a range in the space; a product needs a list of choices")
        values[name] = space.choices.get(name, [getattr(base, name)])
    return values


def point_values(space: FittedSpace, base: TrainConfig, narrowed: dict[str, list[Any]]) -> dict[str, list]:
    """The values tried per point knob: the space's (the baseline's first), or `narrowed` (--points), each of
    which must be a value of the space here; a knob the space lacks keeps the baseline's value."""
    out: dict[str, list[Any]] = {}
    for name in POINT_KNOBS:
        offered = space.choices.get(name)
        if name in narrowed:
            if offered is None or (missing := [v for v in narrowed[name] if v not in offered]):
                raise ConfigError(
                    f"--points {name}: {missing if offered else narrowed[name]} not in the space here "
                    f"(its values: {offered or 'none, it is not a list knob of the space'})"
                )
            offered = narrowed[name]
        if offered is not None:
            mine = getattr(base, name)
            out[name] = [mine] * (mine in offered) + [v for v in offered if v != mine]
    return out


def points(values: dict[str, list[Any]], base: TrainConfig) -> list[dict[str, Any]]:
    """One knob set per distinct (effective batch, peak lr) of the values' product (tuner/space/knobs.py:
    train_point): at the baseline's batch lr_scaling none, sqrt and linear train the same numbers."""
    baseline = base.model_dump()
    found: dict[tuple[int, float], dict[str, Any]] = {}
    for combo in itertools.product(*values.values()):
        knobs = dict(zip(values, combo))
        found.setdefault(train_point(knobs, baseline), knobs)
    return list(found.values())


def product(values: dict[str, list[Any]], point: dict[str, Any]) -> list[dict[str, Any]]:
    """Every combination of the knobs' values, at `point`."""
    return [{**point, **dict(zip(values, combo))} for combo in itertools.product(*values.values())]


def random_configs(space: FittedSpace, n: int, seed: int, passing: list[dict[str, Any]]) -> list[dict]:
    """`n` configs drawn from the whole space (every knob but the point knobs, uniformly; a log range
    log-uniformly), each at a passing point drawn with them: the same `seed` and points, the same configs."""
    rng = random.Random(seed)
    drawn = []
    for _ in range(n if passing else 0):
        knobs = {k: rng.choice(v) for k, v in space.choices.items() if k not in POINT_KNOBS}
        knobs.update({k: _draw(rng, r) for k, r in space.ranges.items() if k not in POINT_KNOBS})
        drawn.append({**knobs, **rng.choice(passing)})
    return drawn


def _draw(rng: random.Random, knob: Range) -> float | int:
    if knob.log:
        value = math.exp(rng.uniform(math.log(knob.low), math.log(knob.high)))
    else:
        value = rng.uniform(knob.low, knob.high)
    return round(value) if knob.integer else value
