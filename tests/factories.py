"""One place that builds the typed records tests need: trial rows and summaries with sensible defaults."""

from __future__ import annotations

from typing import Any

from tuner.records import Summary, TrialRow


def make_row(
    tid: str, phase: str = "screen", config: dict[str, Any] | None = None, **fields: Any
) -> TrialRow:
    """A finished trial row; `fields` set any TrialRow field (status, tokens_per_s, val_loss, ...)."""
    values: dict[str, Any] = {"id": tid, "phase": phase, "config": dict(config or {}), "status": "ok"}
    return TrialRow(**(values | fields))


def make_summary(**fields: Any) -> Summary:
    """A summary; nested sections may be given as dicts, trials as rows or dicts."""
    return Summary.model_validate(fields)
