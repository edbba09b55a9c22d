"""The loss horizon: how far the loss check's runs train (issue 36 item 3).

A loss run trains the planned run (`train.tokens`), unless `quality.loss_horizon` is shorter: then the
baseline and every contender train the same prefix of it, equal tokens, with the planned run's lr schedule
(`max_steps` cuts the run; `schedule_steps` still spans `train.tokens`), and are compared there. The prefix
is rounded up to a whole number of optimizer steps for every batch the space offers (the least common
multiple of their tokens per step), so no run trains a token more than another.

The budget is given in tokens, not minutes: the baseline's loss run starts with the screen, before any
speed is known to turn minutes into tokens, and a prefix in tokens is the same on every machine, so a
validation measured on one GPU (bench/horizon_agreement.py) holds on another.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from trainables.config import TrainConfig

# What bench/horizon_agreement.py writes by default; a report cites it where it is present.
VALIDATION_FILE = Path(__file__).resolve().parents[2] / "docs" / "results" / "horizon_agreement.json"
_SUFFIX = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9}


class LossHorizon(BaseModel):
    """The horizon the loss limit was applied at: the planned run, or a prefix of it of `tokens` tokens."""

    model_config = ConfigDict(extra="forbid")
    planned_tokens: int = Field(gt=0, description="train.tokens: the run the answer is for")
    tokens: int = Field(gt=0, description="tokens every loss run trained (the planned run's, or a prefix)")
    step_tokens: int = Field(
        gt=0, description="the prefix is a whole number of these: every searched batch's tokens per step"
    )

    @property
    def is_prefix(self) -> bool:
        return self.tokens < self.planned_tokens

    @property
    def fraction(self) -> float:
        return self.tokens / self.planned_tokens

    def max_steps(self, tokens_per_step: int) -> int | None:
        """The steps a loss run of `tokens_per_step` trains to the horizon (None: its whole budget)."""
        return math.ceil(self.tokens / tokens_per_step) if self.is_prefix else None


def parse_tokens(value: Any) -> int:
    """20000000, '20M', '1.5B', '500K' -> tokens. A duration is refused (see the module's docstring), and so
    is a lowercase 'm', which reads as minutes."""
    if isinstance(value, bool):
        raise ValueError(f"bad token count {value!r}")
    if isinstance(value, int | float) and value == int(value):
        count = int(value)
    else:
        found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KkMB]?)\s*", str(value))
        if not found:
            raise ValueError(
                f"bad token count {value!r} (use tokens: 20000000, 20M, 1.5B; not a duration: the "
                "baseline's loss run starts before any speed is measured to convert it)"
            )
        count = int(float(found.group(1)) * _SUFFIX[found.group(2).lower()])
    if count <= 0:
        raise ValueError(f"a token count must be positive, not {value!r}")
    return count


def step_tokens(base: TrainConfig, space: dict[str, Any]) -> int:
    """The least common multiple of the tokens per step of every batch the space offers (a knob given as a
    range counts with the baseline's value: its steps are rounded up, see LossHorizon.max_steps)."""

    def choices(knob: str) -> list[int]:
        given = space.get(knob)
        return [int(v) for v in given] if isinstance(given, list) else [int(getattr(base, knob))]

    sizes = {
        b * g * s
        for b, g, s in itertools.product(choices("batch_size"), choices("grad_accum"), choices("seq_len"))
    }
    return math.lcm(*sizes)


def horizon_for(base: TrainConfig, space: dict[str, Any], budget: int | None) -> LossHorizon:
    """The horizon of a search: the planned run, or the prefix of `budget` tokens rounded up to whole steps
    of every searched batch (the planned run again when that reaches it)."""
    planned, unit = base.tokens, step_tokens(base, space)
    if budget is None or budget >= planned:
        return LossHorizon(planned_tokens=planned, tokens=planned, step_tokens=unit)
    return LossHorizon(
        planned_tokens=planned, tokens=min(planned, math.ceil(budget / unit) * unit), step_tokens=unit
    )


def at_horizon(case: dict[str, Any], horizon: LossHorizon) -> dict[str, Any]:
    """A loss run's training config cut to the horizon (as given at the planned run's)."""
    steps = horizon.max_steps(case["batch_size"] * case.get("grad_accum", 1) * case["seq_len"])
    return {**case, "max_steps": steps} if steps is not None else case


def seed_noise(losses: list[float]) -> float | None:
    """The seed-to-seed noise of the baseline's loss at the horizon: the spread (max - min) of its seeds'
    val losses (None: fewer than two). With two seeds it is one draw of |L1 - L2|, whose mean is ~1.13 sigma
    of one run's loss; a contender (one seed) against the baseline's two-seed mean differs by noise of
    ~1.22 sigma. The report shows it beside the limit, for the reader to judge a near miss; the limit does
    not include it (tuner/rules/loss_limit.py)."""
    return max(losses) - min(losses) if len(losses) >= 2 else None


def validation_note(
    path: Path = VALIDATION_FILE, limit_of: Callable[[list[float], float, str], float] | None = None
) -> str | None:
    """One line of the recorded validation (bench/horizon_agreement.py's JSON), or None where none is. With
    `limit_of` (seed losses, tolerance, mode -> limit: the loss rule now), the first horizon's recorded
    losses are judged again by it, so the line speaks of the rule the search applies, not the one the
    bench ran under."""
    try:
        data = json.loads(path.read_text())
        agreed, total = int(data["agreed"]), int(data["total"])
        if limit_of is not None:
            agreed, total = _judged_again(data["horizons"][0], limit_of)
        where = ", ".join(str(data[k]) for k in ("config", "device", "date") if data.get(k))
        return (
            f"on {where}: the verdict at a prefix of {float(data['fraction']):.0%} of the planned run agreed "
            f"with the full run's for {agreed}/{total} configs (bench/horizon_agreement.py)"
        )
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None


def _judged_again(
    horizon: dict[str, Any], limit_of: Callable[[list[float], float, str], float]
) -> tuple[int, int]:
    """(agreed, total) of a recorded horizon's verdicts, its prefix losses judged by `limit_of`."""
    recorded = horizon.get("loss_limit") or horizon["gate"]  # the bench's JSON before the limit had its name
    limit = limit_of(
        [float(s) for s in recorded["seed_losses"]], float(recorded["tolerance"]), recorded["mode"]
    )
    trained = [v for v in horizon["verdicts"] if v["status"] == "ok"]
    agreed = sum(
        (v["short_loss"] is not None and v["short_loss"] <= limit) == v["full_pass"] for v in trained
    )
    return agreed, len(trained)
