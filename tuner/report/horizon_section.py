"""Where the loss limit was applied (tuner/rules/horizon.py): the full planned run, or a prefix of it, with the seed
noise measured on the baseline there and how far short-horizon verdicts are known to agree with full runs."""

from __future__ import annotations

from tuner.report.fmt import fmt_loss
from tuner.rules.horizon import LossHorizon
from tuner.state.records import LossLimit, Summary

HEAD = "Where the loss was judged"


def horizon_lines(summary: Summary) -> list[str]:
    """The section's bullets (none for a summary without a loss limit)."""
    loss_limit = summary.loss_limit
    if loss_limit is None:
        return []
    horizon = loss_limit.horizon
    if horizon is None or not horizon.is_prefix:
        planned = f" ({horizon.planned_tokens:,} tokens)" if horizon else ""
        return [f"At the full planned run{planned}: every loss run trained it, the baseline at one seed."]
    return [
        f"At a prefix of {horizon.tokens:,} tokens, {horizon.fraction:.1%} of the planned run's "
        f"{horizon.planned_tokens:,} (`quality.loss_horizon`): the baseline and every loss-checked config "
        "trained these tokens (a whole number of steps for every batch searched), on the planned run's lr "
        "schedule, and were compared there; not one was trained to the end.",
        _noise(loss_limit),
        _trust(loss_limit),
    ]


def budget_text(horizon: LossHorizon | None) -> str:
    """How far every loss run trained, for the notes on how each number was measured."""
    if horizon is None or not horizon.is_prefix:
        return "full token budget"
    return f"loss horizon, a {horizon.tokens:,}-token prefix of the planned run ({horizon.fraction:.1%})"


def _noise(loss_limit: LossLimit) -> str:
    if loss_limit.noise is None:
        return (
            "Seed noise: not measured (the baseline's run at its second seed failed); the "
            f"{loss_limit.sentence()}."
        )
    seeds = " and ".join(fmt_loss(loss) for loss in loss_limit.seed_losses)
    return (
        f"Seed noise: the baseline at two seeds reached {seeds} (difference {loss_limit.noise:.4f}); the "
        f"{loss_limit.sentence()}. The difference is shown for judging, not added to the limit: a loss "
        "within it of the limit is within the noise either way (a difference from two runs is itself a "
        "rough figure)."
    )


def _trust(loss_limit: LossLimit) -> str:
    if loss_limit.validation:
        checked = loss_limit.validation
        return f"How far to trust it: short-horizon verdicts were checked against full runs {checked}."
    return (
        "How far to trust it: no validation of short-horizon verdicts is recorded on this machine "
        "(bench/horizon_agreement.py); a verdict at a prefix says where each loss stands there, and a "
        "config whose curve crosses the baseline's later (a larger batch catches up late) may be judged "
        "otherwise by the full run."
    )
