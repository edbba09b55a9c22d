"""The usual hand recipe and the screen's start points.

What an engineer does first to any training script, by hand: bf16 autocast, `torch.compile`, fused AdamW, at
the baseline's own batch, lr and token budget. The search always times it (a start point of the screen) and,
since it trains the baseline's numbers in another precision, the loss check reaches it early (a candidate at
the baseline's batch and lr), so the answer is never below it where it passes. `search.recipe` says what it
is (null: none); OUT/recipe.yaml is it as a train config, which a user, or bench/device/workloads.sh, trains
alone to compare with best.yaml.

The screen also times the baseline itself where the space holds its values: its figure is the one every
speed-up is read against, measured like the rest, so the loss check spends no run on a config screened slower.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainables.config import TrainConfig
from tuner.config import Knob, Range, SearchSection
from tuner.space.domains import applicable, start_point
from tuner.state.records import RecipeResult, TrialRow

# Screen figures of compiled runs came out up to 37% under the same config's figure alone where other runs
# compiled beside them (the recipe on an H200: nanoGPT 706K in the screen, 1.12M alone; the HF Llama 1.08M,
# 1.33M; 2026-11-29). So the recipe stays in the loss check and the re-measure while its screen figure is
# at least this share of the fastest passing config's: the answer is then picked against it on exclusive,
# repeated figures, never on the screen's.
SCREEN_MARGIN = 0.6
# The recipe's knobs that apply only where the trials have CUDA: on a CPU, Inductor's C++ compile of even the
# smoke model costs more than the short runs it would speed up, and the recipe is a GPU engineer's first try.
CUDA_ONLY = frozenset({"compile"})


def in_space(
    space: dict[str, Knob], recipe: dict[str, Any] | None, base: TrainConfig, cuda: bool
) -> dict[str, Knob]:
    """The space with the recipe's values offered: a knob the space lacks becomes a choice between the
    baseline's value and the recipe's, a choice list gains the recipe's value. Knobs the hardware cannot run
    (the space left them out) and CUDA_ONLY knobs without CUDA stay as they are."""
    out = dict(space)
    for name, value in (recipe or {}).items():
        if name in CUDA_ONLY and not cuda:
            continue
        knob = out.get(name)
        if knob is None:
            out[name] = list(dict.fromkeys([getattr(base, name), value]))
        elif isinstance(knob, list) and value not in knob:
            out[name] = [*knob, value]
    return out


def recipe_point(space: dict[str, Knob], recipe: dict[str, Any] | None) -> dict[str, Any]:
    """The recipe's knobs that the space (already trimmed to the hardware) offers: the recipe as it can run
    here ({} when nothing of it can)."""
    return {k: v for k, v in (recipe or {}).items() if _offers(space.get(k), v)}


def start_points(
    search_points: list[dict[str, Any]],
    recipe: dict[str, Any] | None,
    space: dict[str, Knob],
    base: TrainConfig,
    notice: Callable[[str], None],
) -> list[dict[str, Any]]:
    """The screen's start points as full points of the space, each once: the baseline (where the space holds
    every value of it), the recipe, then the config's own `start_points`."""
    points = [start_point({}, space, base, notice)] if times_baseline(space, base) else []
    if mine := recipe_point(space, recipe):
        points.append(start_point(mine, space, base, notice))
    points += [start_point(p, space, base, notice) for p in search_points]
    distinct: list[dict[str, Any]] = []
    for point in points:
        if point and point not in distinct:
            distinct.append(point)
    return distinct


def times_baseline(space: dict[str, Knob], base: TrainConfig) -> bool:
    """Whether the screen times the baseline itself: the space holds every value of it."""
    return all(_offers(knob, getattr(base, name)) for name, knob in space.items())


def _offers(knob: Knob | None, value: Any) -> bool:
    if knob is None:
        return False
    return knob.low <= value <= knob.high if isinstance(knob, Range) else value in knob


def as_run_here(search: SearchSection, base: TrainConfig, hw: dict[str, Any]) -> dict[str, Any]:
    """The recipe's knobs as the search ran them on this hardware (those it cannot run left out)."""
    space, _, _ = applicable(in_space(search.space, search.recipe, base, bool(hw.get("cuda"))), hw)
    return recipe_point(space, search.recipe)


def result(
    knobs: dict[str, Any], base: TrainConfig, screen: list[TrialRow], yaml: str | None
) -> RecipeResult | None:
    """The recipe's record: its screen run (the first run of exactly its point: the recipe's knobs, the
    baseline's values for the rest of the space) with that run's loss verdict; None without a recipe."""
    if not knobs:
        return None
    ids = row_ids(screen, knobs, base)
    row = next((r for r in screen if r.id in ids), None)
    found: dict[str, Any] = {} if row is None else {
        "trial": row.id, "tokens_per_s": row.tokens_per_s, "val_loss": row.val_loss, "feasible": row.feasible
    }  # fmt: skip
    return RecipeResult(knobs=knobs, yaml=yaml, **found)


def _point(config: dict[str, Any], knobs: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """The recipe's point over the knobs `config` names: the recipe's value, else the baseline's."""
    return {name: knobs.get(name, base.get(name)) for name in config}


def row_ids(screen: list[TrialRow], knobs: dict[str, Any], base: TrainConfig) -> frozenset[str]:
    """The screen runs of exactly the recipe's point ({} without a recipe)."""
    if not knobs:
        return frozenset()
    values = base.model_dump()
    return frozenset(r.id for r in screen if r.config and r.config == _point(r.config, knobs, values))


def in_reach(recipe_speed: float | None, best_speed: float | None) -> bool:
    """Whether the recipe's screen figure is close enough to `best_speed` that only exclusive runs can tell
    them apart (SCREEN_MARGIN)."""
    if not recipe_speed or recipe_speed <= 0:
        return False
    return best_speed is None or recipe_speed >= SCREEN_MARGIN * best_speed
