"""summary.json as older searches wrote it, read as today's: every reader of an older summary's loss limit
reads it here (`Summary` upgrades it on load; bench/decisions_diff.py reads the raw file)."""

from __future__ import annotations

from typing import Any

OLD_LOSS_LIMIT_KEY = "loss_gate"  # summary.json's key for the loss limit before it was named so


def loss_limit_in(summary: dict[str, Any]) -> Any:
    """A saved summary's loss limit (summary.json's `loss_limit`, or `loss_gate` as searches wrote it
    before), as it was written; None where it has none."""
    return summary.get("loss_limit", summary.get(OLD_LOSS_LIMIT_KEY))


def with_loss_limit(data: Any) -> Any:
    """summary.json from before the loss limit had its name kept it as `loss_gate`, and older still as
    `tolerance` {value, mode, limit} with the baseline loss read from `baseline` (no limit where any of
    them is missing)."""
    if not isinstance(data, dict) or not {"tolerance", OLD_LOSS_LIMIT_KEY} & data.keys():
        return data
    data = dict(data)
    tol = data.pop("tolerance", None) or {}
    limit = loss_limit_in(data)
    data.pop(OLD_LOSS_LIMIT_KEY, None)
    if limit is None:
        base = data.get("baseline") or {}
        base_loss = base.get("val_loss") if isinstance(base, dict) else base.val_loss
        old = {"baseline_loss": base_loss, "tolerance": tol.get("value"), "limit": tol.get("limit")}
        limit = {**old, "mode": tol.get("mode", "absolute")} if None not in old.values() else None
    return {**data, "loss_limit": limit}
