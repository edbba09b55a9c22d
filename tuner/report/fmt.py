"""How the reports write a number, and the small summary helpers every report module shares."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, TypeGuard

from trainables.common.progress import fmt_seconds
from tuner.space.knobs import RUN_ONLY_FIELDS, knob_diff
from tuner.state.records import Best, LossLimit, Summary, short_node_id

DASH = "—"
NODE_ID = re.compile(r"\b[0-9a-f]{56}\b")  # a Ray node id, as notices from before short ids spell it


def is_num(x: Any) -> TypeGuard[float]:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def fmt_tps(value: Any) -> str:
    return f"{value:,.0f}" if is_num(value) else DASH


def one_run_text(best: Best | None) -> str:
    """Where one run of the winner and one of the baseline should put their speed ratio; "" if unknown."""
    if best is None or len(best.speedup_one_run) != 2:
        return (best.speedup_one_run_note or "") if best else ""
    lo, hi = best.speedup_one_run
    return f"one run of each outside the search: {lo:.1f}x–{hi:.1f}x at 95%"


def fmt_mem(mb: Any) -> str:
    if not is_num(mb):
        return DASH
    return f"{mb:,.0f} MiB" if mb < 1024 else f"{mb / 1024:.1f} GiB"


def fmt_loss(value: Any) -> str:
    return f"{value:.4f}" if is_num(value) else DASH


def fmt_jpt(value: Any) -> str:
    """Energy per token, in millijoules (a token costs ~1e-4..1e-2 J)."""
    return f"{value * 1e3:.3g} mJ" if is_num(value) else DASH


def fmt_warmup(seconds: Any) -> str:
    """A compile + warm-up time: tenths of a second below 10 s (eager warm-ups take a second or two)."""
    return f"{seconds:.1f}s" if is_num(seconds) and seconds < 10 else fmt_seconds(seconds)


def fmt_tokens(tokens: Any) -> str:
    return f"{tokens:,.0f} tokens" if is_num(tokens) else DASH


def as_summary(summary: Summary | Mapping[str, Any]) -> Summary:
    """A saved summary.json (a dict) validated into the typed record; a Summary passes through."""
    return summary if isinstance(summary, Summary) else Summary.model_validate(summary)


def limit_text(loss_limit: LossLimit | None) -> str:
    """The loss rule with its numbers (LossLimit.sentence, the one wording every output uses)."""
    return loss_limit.sentence() if loss_limit else f"limit {DASH}"


def over_limit(loss: float | None, loss_limit: LossLimit | None) -> bool:
    """A loss figure over the loss limit; False with no figure or no loss limit (nothing to mark)."""
    return is_num(loss) and loss_limit is not None and not loss_limit.passes(loss)


def changed(config: dict[str, Any], baseline: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """The knobs `config` changes from the baseline, leaving out the run's bookkeeping fields."""
    return {k: v for k, v in knob_diff(config, baseline).items() if k not in RUN_ONLY_FIELDS}


def knobs_text(knobs: Mapping[str, Any]) -> str:
    """compile=default, kernels=fused"""
    return ", ".join(f"{k}={v}" for k, v in knobs.items())


def short_ids(text: str) -> str:
    """`text` with every full Ray node id cut to its short form (summaries from before short ids)."""
    return NODE_ID.sub(lambda m: short_node_id(m.group()), text)
