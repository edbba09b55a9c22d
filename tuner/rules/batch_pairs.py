"""The batch pairs a search config's space allows: a batch_size or micro_batch choice that pairs with none of
the other knob's values, or a start point that fixes a pair that cannot run, is refused with the config
(tuner/config.py:SearchConfig); the screen skips a space's other bad pairs (tuner/space/batch_fit.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainables.config import TrainConfig
from trainables.micro_batches import splits


def batch_pairs(
    space: Mapping[str, Any], start_points: list[dict[str, Any]], train: TrainConfig
) -> str | None:
    """The one line for a batch_size or micro_batch choice that pairs with none of the other knob's values,
    or a start point that fixes a pair that cannot run (a micro_batch below its batch must divide it). A
    space's other bad pairs (batch_size [12, 16] x micro_batch [8]: 12 in 8s) are the screen's to skip
    (tuner/space/batch_fit.py:BatchFit.refusal); a choice that pairs with nothing would never run at all."""
    batches = space.get("batch_size", [train.batch_size])
    micros = space.get("micro_batch", [train.micro_batch])
    if not isinstance(batches, list) or not isinstance(micros, list):
        return None  # a range, no list of values: the screen skips each bad pair it proposes
    for m in micros if "micro_batch" in space else []:
        if not any(splits(b, m) for b in batches):
            return (
                f"config key 'search.space.micro_batch': choice {m} would never run: it is below and divides "
                f"none of batch_size {batches} (below the batch, a micro_batch must divide it)"
            )
    for b in batches if "batch_size" in space else []:
        if not any(splits(b, m) for m in micros):
            return (
                f"config key 'search.space.batch_size': choice {b} would never run: none of micro_batch {micros} "
                "divides it or is at least it"
            )
    for i, point in enumerate(start_points):
        pair = {"batch_size": train.batch_size, "micro_batch": train.micro_batch}
        if all(k in point or k not in space for k in pair):  # else the space fills it in (space.start_point)
            b, m = point.get("batch_size", train.batch_size), point.get("micro_batch", train.micro_batch)
            if not splits(b, m):
                return (
                    f"config key 'search.start_points[{i}]': micro_batch {m} must divide batch_size {b} "
                    "or be at least it"
                )
    return None
