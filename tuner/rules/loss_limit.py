"""The loss rule, its one home: which val loss passes, and the one sentence that says so.

    limit = baseline loss + tolerance                 (quality.mode: absolute; in the loss's units, nats)
    limit = baseline loss + tolerance x |baseline loss|   (quality.mode: relative; baseline x (1 + tolerance))

The baseline loss is its val loss, or the mean of its seeds' where it trained several (at a prefix of the
planned run, tuner/rules/horizon.py, two). Nothing else moves the limit: the seeds' spread is recorded and shown
beside it, so a reader can judge how much of a gap is noise, but it is not added to it. A hidden widening
made the limit say more than the tolerance the user set (the 100M answer passed at +0.065 over the
baseline the report printed, "within 0.05"); a user who wants room for the noise sets a larger tolerance,
and sees it. tuner/state/records.py re-exports LossLimit, a field of summary.json.

An absolute tolerance is a fixed amount of loss: where it is more than SCALE_SHARE of the baseline's loss it
no longer fits the loss's scale (0.05 over a classifier's 0.0286 passes a loss 2.7x the baseline's), and the
search says so, in a notice once the baseline's loss is known (`warn_of_scale`) and in the sentence.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal, Protocol, cast

from pydantic import Field

from tuner.rules.horizon import LossHorizon, seed_noise, validation_note
from tuner.rules.record_base import Record


class LossRun(Protocol):
    """What a verdict reads of a loss run (a TrialRow has it): whether it trained, and its val loss."""

    # read-only: a TrialRow's status is a Literal of str, which a writable str member would refuse
    @property
    def status(self) -> str: ...

    @property
    def val_loss(self) -> float | None: ...


Mode = Literal["absolute", "relative"]
# Where the tolerance and its mode came from (tuner/config.py:QualitySection.tolerance_from).
ToleranceFrom = Literal["config", "workload", "default"]
FROM_TEXT: dict[str, str] = {
    "config": "set in the config",
    "workload": "the workload declared (its loss_tolerance)",
    "default": "by default",
}
WHY_DEFAULT = ", as neither the config nor the workload sets one"  # why the default applied, in the sentence
SHOWN = 1e-4  # a loss is shown to 4 decimals (tuner/report/fmt.py:fmt_loss)
# An absolute tolerance above this share of the baseline's loss does not fit the loss's scale. 25%: the default
# 0.05 nats is 1-4% of a language model's loss (1.2-5 nats) and relative mode's default is 5%; five times that
# passes a config a quarter worse, which no one meant by "0.05". So at the default it is said only for a loss
# under 0.2 nats (no LM near its usual loss) and for any well-fit classifier (digits' 0.04-0.1: 50-125%).
SCALE_SHARE = 0.25


class LossLimit(Record):
    """The loss limit: a run passes when it trained (status ok) to a finite val loss at most `limit`, the
    baseline's val loss plus the tolerance (the module's docstring; tuner/config.py:QualitySection makes it).
    `sentence()` is how every output states it."""

    baseline_loss: float = Field(description="the baseline's val loss at the horizon (the mean of its seeds)")
    tolerance: float = Field(
        ge=0,
        description="allowed val-loss increase over the baseline: in the loss's units (absolute), or a "
        "fraction of the baseline's loss (relative)",
    )
    mode: Mode = Field(
        description="absolute: limit = baseline + tolerance; relative: baseline x (1 + tolerance)"
    )
    limit: float = Field(
        description="the highest val loss that passes: baseline_loss plus the tolerance, no more"
    )
    horizon: LossHorizon | None = Field(None, description="where losses were compared (None: the full run)")
    seed_losses: list[float] = Field(default_factory=list, description="the baseline's val loss per seed")
    noise: float | None = Field(
        None, ge=0, description="the seeds' spread (max - min): shown beside the limit, not added to it"
    )
    validation: str | None = Field(None, description="how short-horizon verdicts agreed with full runs")
    tolerance_from: ToleranceFrom | None = Field(
        None,
        description="where the tolerance and mode came from: config (quality.tolerance / quality.mode), "
        "workload (its loss_tolerance), default (0.05 absolute); None in summaries from before it was kept",
    )
    allowance_share: float | None = Field(
        None,
        description="the limit's room above the baseline as a share of the baseline's loss; absolute and "
        "above SCALE_SHARE (0.25): it does not fit the loss's scale, and the search says so; None at a loss "
        "of 0, or in summaries from before it was kept",
    )

    @classmethod
    def of(
        cls,
        baseline_loss: float,
        tolerance: float,
        mode: Mode,
        horizon: LossHorizon | None = None,
        more_seeds: list[float] | None = None,
        tolerance_from: ToleranceFrom | None = None,
    ) -> LossLimit:
        """`more_seeds`: the baseline's val losses at other seeds, same horizon (their mean is its loss)."""
        seeds = [baseline_loss, *more_seeds] if more_seeds else []
        loss = sum(seeds) / len(seeds) if seeds else baseline_loss
        prefix = horizon is not None and horizon.is_prefix
        room = allowance(loss, tolerance, mode)
        return cls(
            baseline_loss=loss,
            tolerance=tolerance,
            mode=mode,
            limit=loss + room,
            horizon=horizon,
            seed_losses=seeds,
            noise=seed_noise(seeds),
            validation=validation_note(limit_of=_limit_of) if prefix else None,
            tolerance_from=tolerance_from,
            allowance_share=room / abs(loss) if loss and math.isfinite(loss) else None,
        )

    @property
    def allowance(self) -> float:
        """How far above the baseline's loss the limit is, by the rule."""
        return allowance(self.baseline_loss, self.tolerance, self.mode)

    def passes(self, val_loss: float | None) -> bool:
        """Whether a val loss is within the limit (None or NaN never is)."""
        return isinstance(val_loss, int | float) and math.isfinite(val_loss) and val_loss <= self.limit

    def verdict(self, run: LossRun) -> bool:
        """A loss run's verdict: it trained without failing, to a loss that passes."""
        return run.status == "ok" and self.passes(run.val_loss)

    def over(self, run: LossRun) -> float | None:
        """How far a loss run's val loss is over the limit (<= 0: it passes; inf: its loss diverged), or None
        where the run says nothing of the loss (out of memory, an error: its config did not train)."""
        if run.status == "nan":
            return math.inf
        if run.status != "ok" or not isinstance(run.val_loss, int | float):
            return None
        return run.val_loss - self.limit if math.isfinite(run.val_loss) else math.inf

    def sentence(self, seeds: bool = True) -> str:
        """The rule with its numbers, as every output says it: 'limit 1.7912 = baseline 1.7412 + 0.05, the
        absolute tolerance set in the config', 'limit 0.0643 = baseline 0.0612 x (1 + 0.05), the relative
        tolerance the workload declared (its loss_tolerance)'; where the baseline trained two seeds, their
        losses and spread follow (`seeds`)."""
        base, tol = f"{self.baseline_loss:.4f}", f"{self.tolerance:g}"
        if self.mode == "absolute":
            arithmetic = f"baseline {base} + {tol}"
        elif self.baseline_loss >= 0:
            arithmetic = f"baseline {base} x (1 + {tol})"
        else:
            arithmetic = f"baseline {base} + {tol} x {abs(self.baseline_loss):.4f}"
        extra = self.limit - self.baseline_loss - self.allowance
        widened = abs(extra) >= SHOWN / 2  # a summary from before this rule: its limit held the seeds' spread
        if widened:
            arithmetic += f" + {extra:.4f} (the seeds' spread, which searches added to the limit then)"
        source = " ".join(
            filter(None, [f"the {self.mode} tolerance", FROM_TEXT.get(self.tolerance_from or "")])
        )
        scale = (WHY_DEFAULT if self.tolerance_from == "default" else "") + _scale_clause(self)
        return (
            f"limit {self.limit:.4f} = {arithmetic}, {source}{scale}{self._seeds(widened) if seeds else ''}"
        )

    def _seeds(self, widened: bool) -> str:
        if len(self.seed_losses) < 2 or self.noise is None:
            return ""
        each = " and ".join(f"{loss:.4f}" for loss in self.seed_losses)
        return (
            f"; the baseline's is the mean of its {len(self.seed_losses)} seeds' {each}, whose spread "
            f"{self.noise:.4f}{'' if widened else ' is shown, not added'}"
        )


def outscales(loss_limit: LossLimit) -> bool:
    """Whether an absolute tolerance's room is more than SCALE_SHARE of the baseline's loss."""
    share = loss_limit.allowance_share
    return loss_limit.mode == "absolute" and share is not None and share > SCALE_SHARE


def _scale_clause(loss_limit: LossLimit) -> str:
    """The sentence's word on the scale, where the tolerance outscales the loss."""
    if not outscales(loss_limit):
        return ""
    return (
        f", {loss_limit.allowance_share:.0%} of the baseline's loss: more than the {SCALE_SHARE:.0%} that fits "
        "its scale"
    )


def scale_warning(loss_limit: LossLimit) -> str | None:
    """One line where the absolute tolerance outscales the baseline's loss, with the fix; None where it fits."""
    if not outscales(loss_limit):
        return None
    base, limit = loss_limit.baseline_loss, loss_limit.limit
    passes = f"up to {limit / base:.1f}x" if base > 0 else f"{limit - base:g} above"
    tolerance = f"the absolute tolerance {loss_limit.tolerance:g}"
    source = " ".join(filter(None, [tolerance, FROM_TEXT.get(loss_limit.tolerance_from or "")]))
    relative = base + allowance(base, loss_limit.tolerance, "relative")
    return (
        f"the loss limit {limit:.4f} passes a val loss {passes} the baseline's {base:.4f}: {source} is "
        f"{loss_limit.allowance_share:.0%} of that loss, more than the {SCALE_SHARE:.0%} that fits its scale; "
        f"--set quality.mode=relative makes the limit {relative:.4f} ({loss_limit.tolerance:.0%} above it), or "
        "set a smaller quality.tolerance"
    )


def warn_of_scale(loss_limit: LossLimit, notice: Callable[[str], None]) -> None:
    """Says `scale_warning` through `notice` (the search's: the report lists its notices), where there is one."""
    if (line := scale_warning(loss_limit)) is not None:
        notice(line)


def _limit_of(seed_losses: list[float], tolerance: float, mode: str) -> float:
    """The limit this rule gives seeds' losses (a recorded validation is judged again by it)."""
    # `mode` as the bench's recorded JSON spells it: the record (a pydantic model) validates it
    return LossLimit.of(seed_losses[0], tolerance, cast(Mode, mode), None, seed_losses[1:]).limit


def allowance(baseline_loss: float, tolerance: float, mode: Mode) -> float:
    """The rule's room above the baseline's loss: the tolerance, or that fraction of the loss (relative)."""
    return tolerance if mode == "absolute" else tolerance * abs(baseline_loss)
