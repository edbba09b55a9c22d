"""The baseline: the user's own training config. Its speed is measured like every other config's (screen,
re-measure); its loss is trained to the full token budget with the fastest execution the screen saw for
its loss key (its twin: the same batch, precision, lr rule, differing only in compile, kernels, loader ...),
because those knobs change how fast a run goes, not where it ends. With no twin screened it trains as is."""

from __future__ import annotations

from typing import Any

from tuner.context import SearchContext, SearchFailed, log
from tuner.knobs import execution, loss_key
from tuner.records import BASELINE_ID, LossGate, TrialRow

# A run the early stopper or the time budget stopped after steady steps has proven its execution works and
# how fast: the baseline under CUDA graphs is slow next to large batches and is often stopped early, and
# without it the baseline's loss run trains at eager speed (13 minutes on an H100 instead of 1.5).
PROVEN = ("ok", "stopped")


def twins(ctx: SearchContext, screen: list[TrialRow]) -> dict[tuple, TrialRow]:
    """The fastest screen run of each loss key that trained steady steps without failing."""
    fastest: dict[tuple, TrialRow] = {}
    for row in screen:
        if row.status not in PROVEN or not row.tokens_per_s:
            continue
        key = loss_key(row.config, ctx.base)
        if key not in fastest or row.tokens_per_s > fastest[key].tokens_per_s:
            fastest[key] = row
    return fastest


def twin(ctx: SearchContext, screen: list[TrialRow]) -> TrialRow | None:
    """The fastest screen run that shares the baseline's loss knobs (None: none screened)."""
    return twins(ctx, screen).get(loss_key({}, ctx.base))


def loss_case(ctx: SearchContext, screen: list[TrialRow]) -> tuple[dict[str, Any], TrialRow | None]:
    """The baseline's loss run (its config with its twin's execution) and the twin (None: none screened)."""
    twin_row = twin(ctx, screen)
    if twin_row is None:
        ctx.notice("no screened config shares the baseline's loss knobs: its loss run trains as configured")
        return {**ctx.base, "out_dir": None}, None
    return {**ctx.base, **execution({**ctx.base, **twin_row.config}), "out_dir": None}, twin_row


def as_baseline(row: TrialRow, twin: TrialRow | None) -> TrialRow:
    """The loss run's row, labelled as the baseline's, with the execution it borrowed."""
    return row.model_copy(
        update={
            "id": BASELINE_ID,
            "phase": BASELINE_ID,
            "config": {},
            "execution": execution(row.train),
            "twin_of": twin.id if twin else None,
        }
    )


def checked(ctx: SearchContext, baseline: TrialRow) -> tuple[TrialRow, LossGate]:
    """The baseline row, with its verdict, and the loss gate it sets; SearchFailed if it did not train."""
    if baseline.status != "ok" or baseline.val_loss is None:
        raise SearchFailed(f"the baseline run failed ({baseline.status}: {baseline.error})")
    gate = ctx.cfg.quality.gate(baseline.val_loss)
    baseline.feasible = gate.verdict(baseline)
    changed = {k: v for k, v in (baseline.execution or {}).items() if ctx.base.get(k) != v}
    how = ", ".join(f"{k}={v}" for k, v in changed.items())
    how = f"as its twin {baseline.twin_of} runs ({how})" if changed else "as configured"
    log(f"baseline: val loss {baseline.val_loss:.4f} (limit {gate.limit:.4f}), trained {how}")
    return baseline, gate
