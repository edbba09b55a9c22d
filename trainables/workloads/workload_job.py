"""A workload as the loop calls it: `Job` wraps the user's object and fills in the protocol's defaults
(trainables/workloads/workload_protocol.py), so the loop, the checks and the flops count never ask what it has."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from torch import nn

from trainables.config import ConfigError, TrainConfig
from trainables.data import datasets
from trainables.workloads import flops
from trainables.workloads.workload_protocol import LOADER_KNOBS, REGION_KNOBS, TOKENS, Batch


class Job:
    """A workload with the protocol's defaults filled in: what the loop calls."""

    def __init__(self, workload: Any, cfg: TrainConfig):
        self.workload, self.cfg = workload, cfg
        self.gives_dataset = callable(getattr(workload, "train_dataset", None))
        self._train_set = self._val_set = None

    def describe(self) -> str:
        own = getattr(self.workload, "describe", None)
        return own() if own else f"{type(self.workload).__name__} ({self.cfg.workload})"

    def build_model(self) -> nn.Module:
        return self.workload.build_model()

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        return self.workload.loss(model, batch)

    def metrics(self, model: nn.Module, batch: Batch) -> dict[str, Any]:
        own = getattr(self.workload, "metrics", None)
        return own(model, batch) if own else {}

    @property
    def unit(self) -> str:
        return getattr(self.workload, "unit", TOKENS)

    @property
    def units_per_example(self) -> int:
        own = getattr(self.workload, "units_per_example", None)
        return own if own is not None else (self.cfg.seq_len if self.unit == TOKENS else 1)

    @property
    def reads_corpus(self) -> bool:
        return getattr(self.workload, "reads_corpus", False) is True

    def fit(self, cfg: TrainConfig) -> TrainConfig:
        """`cfg` counting this workload's units per example (with_units); the job trains by it from here."""
        self.cfg = with_units(cfg, self.units_per_example, self.unit, cfg.workload)
        return self.cfg

    def lr_multiplier(self, param_name: str) -> float:
        own = getattr(self.workload, "lr_multiplier", None)
        return own(param_name) if own else 1.0

    def save(self, out_dir: str) -> None:
        own = getattr(self.workload, "save", None)
        if own:
            own(out_dir)

    def evaluation(self, model: nn.Module) -> AbstractContextManager:
        own = getattr(self.workload, "evaluation", None)
        return own(model) if own else nullcontext()

    def compile_regions(self, model: nn.Module) -> list[nn.Module]:
        """The modules `compile_scope: blocks` compiles one by one and `activation_checkpointing` picks
        from (the workload's compile_regions)."""
        return list(self.workload.compile_regions(model))

    def flops_per_token(self, model: nn.Module) -> tuple[float, str]:
        """Training FLOPs per token and where the figure comes from (flops.FROM_WORKLOAD: the workload's
        own count; flops.FROM_PARAMETERS: 6 x trainable parameters, where it declares none)."""
        own = getattr(self.workload, "flops_per_token", None)
        if not callable(own):
            return flops.six_times_parameters(model), flops.FROM_PARAMETERS
        value = own(model)
        if not flops.positive(value):
            raise ConfigError(
                f"workload {self.cfg.workload!r}: flops_per_token(model) returned {value!r}, expected a "
                "positive number (training FLOPs per token, forward + backward)"
            )
        return float(value), flops.FROM_WORKLOAD

    @property
    def names_blocks(self) -> bool:
        return callable(getattr(self.workload, "compile_regions", None))

    @property
    def supports(self) -> frozenset[str]:
        # the region knobs are the workload's to offer only by naming its blocks (compile_regions)
        regions = REGION_KNOBS if self.names_blocks else frozenset()
        own = frozenset(getattr(self.workload, "supports", ())) - REGION_KNOBS | regions
        if not self.gives_dataset:
            return own
        on_device = self.no_device_loader() is None
        return own | LOADER_KNOBS | ({"loader"} if on_device else set())

    def no_device_loader(self) -> str | None:
        """Why the loop cannot batch this workload's data on the device (None: it can)."""
        if not self.gives_dataset:
            return "it makes its own batches (train_batches)"
        return datasets.device_loadable(self.train_set())

    def train_set(self):
        if self._train_set is None:
            self._train_set = self.workload.train_dataset()
        return self._train_set

    def val_set(self):
        if self._val_set is None and callable(getattr(self.workload, "val_dataset", None)):
            self._val_set = self.workload.val_dataset()
        return self._val_set

    def train_batches(self, device: torch.device, start_step: int = 0) -> Iterator[Batch]:
        if not self.gives_dataset:
            return self.workload.train_batches(device, start_step)
        held_out = self.val_set() is None
        return datasets.example_batches(self.train_set(), self.cfg, device, start_step, held_out)

    def val_batches(self, device: torch.device) -> list[Batch]:
        if not self.gives_dataset:
            return self.workload.val_batches(device)
        if self.val_set() is not None:
            return datasets.val_example_batches(self.val_set(), self.cfg, device)
        return datasets.val_example_batches(self.train_set(), self.cfg, device, held_out=True)


def as_job(workload: Any, cfg: TrainConfig) -> Job:
    return workload if isinstance(workload, Job) else Job(workload, cfg)


def check_checkpointing(every: int, blocks: int, section: str = "") -> None:
    """activation_checkpointing against the number of blocks the workload names: a k above it would
    checkpoint none of them (ConfigError, one line)."""
    if every > blocks:
        key = ".".join(filter(None, (section, "activation_checkpointing")))
        raise ConfigError(
            f"config key {key!r}: {every} checkpoints one block in every {every}, but the workload's "
            f"compile_regions(model) names {blocks} block{'s' * (blocks != 1)}, so none would be (use 0 = "
            f"off to {blocks})"
        )


def with_units(cfg: TrainConfig, units: int, unit: str, name: str, section: str = "") -> TrainConfig:
    """`cfg` counting `units` of the workload's per example (units_per_example; left unset where they are
    seq_len, an LM's tokens); ConfigError (one line) where the config says another count."""
    if cfg.units_per_example not in (None, units):
        key = ".".join(filter(None, (section, "units_per_example")))
        raise ConfigError(
            f"config key {key!r}: {cfg.units_per_example} but workload {name!r} counts {units} {unit} per "
            "example (leave the key out: the workload declares it)"
        )
    if cfg.units_per_example is not None or units == cfg.seq_len:
        return cfg
    return cfg.model_copy(update={"units_per_example": units})
