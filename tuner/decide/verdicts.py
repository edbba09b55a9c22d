"""What the loss runs so far say of a config that has not trained its own: the verdicts the screen's sampler
is told (tuner/space/sampler.py) and the loss check reads before it spends a run (tuner/decide/loss_plan.py).

Two rules, each from the loss rule's own verdicts (tuner/rules/loss_limit.py:LossLimit.over):
- one loss key, one verdict: configs that differ only in how they run train the same numbers
  (tuner/space/knobs.py:loss_key);
- a larger batch at the same peak lr trains fewer steps of the same budget: where a config failed the limit,
  every config that differs from it only by a larger effective batch at the same peak lr is ruled out too,
  by at least as much (issue 54: nanoGPT's batch-128 and batch-256 configs at the baseline's lr all failed,
  and the screen and the loss check kept spending runs on them).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tuner.rules.loss_limit import LossLimit, LossRun
from tuner.space.knobs import loss_key, train_point

BATCH_LABELS = frozenset({"batch_size", "grad_accum", "peak_lr"})  # what the rule-out compares apart


@dataclass(frozen=True)
class Judged:
    """A loss key's verdict: its (effective batch, peak lr), the loss knobs beside them, and how far its loss
    was over the limit (<= 0 passes)."""

    point: tuple[int, float]
    rest: tuple
    over: float


@dataclass(frozen=True)
class LossVerdicts:
    """The loss limit and the verdict of every loss key trained so far."""

    base: dict[str, Any]
    limit: LossLimit
    judged: dict[tuple, Judged] = field(default_factory=dict)

    @classmethod
    def of(
        cls, base: dict[str, Any], limit: LossLimit, runs: Iterable[tuple[dict[str, Any], LossRun]]
    ) -> LossVerdicts:
        """From (knobs it stands for, the loss run) pairs; a run that says nothing of the loss (OOM, an
        error) judges nothing, and of two runs of one key the later stands."""
        judged = {}
        for knobs, run in runs:
            over = limit.over(run)
            if over is not None:
                judged[loss_key(knobs, base)] = Judged(train_point(knobs, base), _rest(knobs, base), over)
        return cls(base, limit, judged)

    def violation(self, config: dict[str, Any]) -> float | None:
        """How far `config`'s loss is over the limit as far as the runs so far tell (> 0: it fails), or None
        where they tell nothing: its own key's verdict, else the least failure that rules it out."""
        own = self.judged.get(loss_key(config, self.base))
        if own is not None:
            return own.over
        ruling = self.ruled_out_by(config)
        return min(j.over for j in ruling) if ruling else None

    def ruled_out_by(self, config: dict[str, Any]) -> list[Judged]:
        """The failures at a smaller or equal effective batch, the same peak lr and the same other loss knobs."""
        (batch, lr), rest = train_point(config, self.base), _rest(config, self.base)
        return [
            j
            for j in self.judged.values()
            if j.over > 0 and j.rest == rest and j.point[1] == lr and j.point[0] <= batch
        ]

    def fails(self, config: dict[str, Any]) -> bool:
        over = self.violation(config)
        return over is not None and over > 0

    def rules_out(self, config: dict[str, Any]) -> bool:
        """Whether another config's failure rules `config` out while its own loss is unjudged."""
        return loss_key(config, self.base) not in self.judged and bool(self.ruled_out_by(config))


def _rest(config: dict[str, Any], base: dict[str, Any]) -> tuple:
    """The loss key without the batch and the peak lr: what two configs of one lr rule must share."""
    return tuple(pair for pair in loss_key(config, base) if pair[0] not in BATCH_LABELS)


def lr_scaling_advice(verdicts: LossVerdicts, space: dict[str, Any]) -> str | None:
    """One line where batches larger than the baseline's failed at its peak lr and the space cannot scale the
    lr with the batch: what the user can add to try them at a scaled lr."""
    if "lr_scaling" in space:
        return None
    batch, lr = train_point({}, verdicts.base)
    failed = sorted(
        {
            j.point[0]
            for j in verdicts.judged.values()
            if j.over > 0 and j.point[1] == lr and j.point[0] > batch
        }
    )
    if not failed:
        return None
    sizes = ", ".join(str(b) for b in failed)
    return (
        f"effective batch {sizes} failed the loss limit at the baseline's peak lr {lr:g} (larger batches at one lr "
        f"train fewer steps of the budget); lr_scaling is not in search.space: add `lr_scaling: [none, sqrt, "
        f"linear]` to try larger batches at a scaled lr"
    )
