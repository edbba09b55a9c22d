"""The shape of each kind of run, in one table: what a run of a role trains (the baseline with the knobs it
stands for laid over it) and for how long. Phases ask `RunShapes.case(role, knobs)`; where a run goes (its
GPU share, its memory cap) is placement's (tuner/runs/placement.py), what it stands for its labels
(trainables/spec.py).

- SPEED, REMEASURE: a short exclusive speed run: the warm-up and `screen_steps` steady steps, one val batch.
- LOSS, BESIDE, AHEAD: the planned run, or the loss horizon's prefix of it.
- PROBE: two steps at one batch and precision, the whole batch in one forward (tuner/space/batch_fit.py).
No run of the search writes checkpoints: `out_dir` is None in every shape.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from trainables.config import TrainConfig
from tuner.rules.horizon import LossHorizon, at_horizon
from tuner.runs.request import Role
from tuner.space.batch_fit import probe_case


@dataclass(frozen=True)
class RunShapes:
    """The runs of one search: its baseline, the screen's steady steps, and the loss horizon."""

    base: TrainConfig
    screen_steps: int
    horizon: LossHorizon

    def case(self, role: Role, knobs: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The training config of a `role` run of baseline + `knobs`."""
        return _SHAPES[role](self, {**self.base.model_dump(), **(knobs or {})})


def _timed(shapes: RunShapes, case: dict[str, Any]) -> dict[str, Any]:
    steps, base = shapes.screen_steps, shapes.base
    return {
        **case,
        "max_steps": base.timing_warmup_steps + steps,
        "eval_interval": 0,
        "eval_tokens": base.example_units * base.eval_batch_size,  # one val batch
        "log_interval": max(1, steps // 4),
        "out_dir": None,
    }


def _loss(shapes: RunShapes, case: dict[str, Any]) -> dict[str, Any]:
    return at_horizon({**case, "out_dir": None}, shapes.horizon)


_SHAPES: dict[Role, Callable[[RunShapes, dict[str, Any]], dict[str, Any]]] = {
    Role.SPEED: _timed,
    Role.REMEASURE: _timed,
    Role.LOSS: _loss,
    Role.BESIDE: _loss,
    Role.AHEAD: _loss,
    Role.PROBE: lambda _shapes, case: probe_case(case, case["batch_size"], case["precision"]),
}
