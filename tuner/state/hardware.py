"""What the trials' machine can do (`Hardware`, probed on a trial worker) and what the batch probe found fits
it (`ProbedBatch`): both kept in OUT/state.json and read by placement and the space."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from tuner.rules.record_base import Record


class ProbedBatch(Record):
    """The batch probe's finding at one precision: the largest forward batch (what one forward takes: the
    micro-batch, or the whole batch) that trained a step, and that step's peak memory (MB, scaled to the
    batch), from which a speed run's GPU share is sized. `checkpointing` is the activation_checkpointing it
    ran with; where the space searches that knob, this is its setting that keeps the most (the largest
    peak: no run's share is sized too small) and `checkpointed` the same finding per other setting probed."""

    batch: int
    peak_mb: float | None = None
    checkpointing: int = 0
    checkpointed: dict[int, ProbedBatch] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _from_a_bare_batch(cls, value: Any) -> Any:
        return {"batch": value} if isinstance(value, int) else value  # state.json before the peak was kept


class Hardware(Record):
    """What the trials' machine can do (probed on a trial worker, so it describes a GPU node)."""

    node: str | None = None
    cpus: int | None = None
    cuda: bool = False
    torch: str | None = None
    backends: dict[str, Any] = Field(default_factory=dict)
    bf16: bool = False
    gpus: int = 0
    gpu_name: str | None = None
    gpu_mem_mb: int | None = None
    cuda_version: str | None = None
    autotune_set: str | None = Field(
        None,
        description="the shipped Triton autotune set for the fused kernels that matches this GPU, if any",
    )
