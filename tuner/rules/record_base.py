"""The base of the search's typed records (tuner/state/records.py, tuner/state/gpu_records.py, and the loss limit,
tuner/rules/loss_limit.py), its own module so that each module of records can derive from it without
importing the other, and below tuner/config.py, which builds the loss limit."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Record(BaseModel):
    """Strict about names (a typo is an error), lenient about absent values (None = not measured)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
