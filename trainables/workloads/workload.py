"""Loading a workload and checking it before any work: `load_workload` builds the one `train.workload`
names (the built-in hybrid LM, or a user's factory, given its model settings), `check_workload` runs it as
the loop will, on the meta device, and says what the search needs to know of it (WorkloadInfo).

The contract a workload meets is trainables/workloads/workload_protocol.py (docs/workloads.md is the user's guide);
the names other modules use are importable from here. `python -m trainables.workloads.workload` prints the table of
TrainConfig fields in docs/workloads.md.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from pydantic import BaseModel, TypeAdapter, ValidationError
from torch import nn
from torch.utils.data._utils.collate import default_collate

from model import HybridConfig
from trainables.common.errors import DataError
from trainables.config import ConfigError, TrainConfig, unknown_key
from trainables.workloads.hybrid_workload import HybridLMWorkload
from trainables.workloads.loss_tolerance import declared_tolerance
from trainables.workloads.user_code import WorkloadSpec, load_factory, needs_path, parse_spec
from trainables.workloads.workload_job import Job, as_job, check_checkpointing, with_units
from trainables.workloads.workload_probe import check_counted, check_declared, checked_forward, first_examples
from trainables.workloads.workload_protocol import OPTIONAL_METHODS, TOKENS, WORKLOAD_KNOBS, Batch, Workload

__all__ = [
    "WORKLOAD_KNOBS",
    "Batch",
    "HybridLMWorkload",
    "Job",
    "Workload",
    "WorkloadInfo",
    "as_job",
    "check_checkpointing",
    "check_workload",
    "load_workload",
    "settings",
    "with_units",
]


# --- loading ----------------------------------------------------------------------------------------------


def load_workload(cfg: TrainConfig, section: str = "") -> Any:
    """The workload `cfg.workload` names, built for `cfg`; ConfigError (one line) when it cannot be."""
    if cfg.workload == "hybrid":
        return HybridLMWorkload(cfg)
    key = ".".join(filter(None, (section, "workload")))
    spec = parse_spec(cfg.workload, key)
    if cfg.workload_path and cfg.workload_path not in sys.path:
        sys.path.append(cfg.workload_path)
    factory = load_factory(spec, key)
    try:
        workload = _call_factory(factory, cfg, spec, section)
    except (ConfigError, DataError):
        raise
    except Exception as err:  # noqa: BLE001 - the user's factory failing is bad input, said in one line
        raise ConfigError(f"workload {spec.text!r}: its factory raised {type(err).__name__}: {err}") from None
    if workload is None or not callable(getattr(workload, "build_model", None)):
        raise ConfigError(
            f"workload {spec.text!r}: {spec.attr}() returned {type(workload).__name__}, expected a workload "
            "(an object with build_model(), loss(model, batch) and train_dataset() or train_batches())"
        )
    return workload


def _call_factory(factory: Callable, cfg: TrainConfig, spec: WorkloadSpec, section: str) -> Any:
    params = [
        p
        for p in inspect.signature(factory).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    key = ".".join(filter(None, (section, "model")))
    if len(params) < 2:
        if cfg.model:
            raise ConfigError(
                f"config key {key!r}: {spec.text!r} takes no model settings (its factory has no second "
                f"parameter, e.g. `def {spec.attr}(cfg, model: MyConfig)`), got {sorted(cfg.model)}"
            )
        return factory(cfg)
    try:
        schema = typing.get_type_hints(factory).get(params[1].name)
    except Exception:  # noqa: BLE001 - an annotation that does not resolve: the settings go as given
        schema = None
    return factory(cfg, settings(schema, cfg.model, key))


def settings(schema: Any, values: dict[str, Any], key: str = "model") -> Any:
    """`values` checked into `schema` (a dataclass or a pydantic model); as given for any other."""
    is_model = isinstance(schema, type) and issubclass(schema, BaseModel)
    if not (is_model or dataclasses.is_dataclass(schema)):
        return dict(values)
    fields = list(schema.model_fields) if is_model else [f.name for f in dataclasses.fields(schema) if f.init]
    for name in values:
        if name not in fields:
            raise ConfigError(unknown_key(f"{key}.{name}", fields, key))
    try:
        return TypeAdapter(schema).validate_python(dict(values))
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join([key, *(str(p) for p in first["loc"])])
        msg = first["msg"].removeprefix("Value error, ")
        return _raise(f"config key {where!r}: {msg} (got {first.get('input')!r})")
    except (TypeError, ValueError) as err:
        return _raise(f"config key {key!r}: {err}")


def _raise(line: str):
    raise ConfigError(line)


# --- the check before any work ----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class WorkloadInfo:
    """What checking a workload found: what the search needs to know of it."""

    spec: str
    description: str
    supports: frozenset[str]
    code_root: str | None = None  # where its code is imported from, when a run elsewhere needs that folder
    unit: str = TOKENS  # what its speeds and budgets count (plural: tokens, images)
    units_per_example: int | None = None  # None: seq_len (an LM's window)
    reads_corpus: bool = True  # it trains on the corpus the search resolves (and pins, and ships)
    loss_tolerance: tuple[str, float] | None = (
        None  # its (mode, tolerance): trainables/workloads/loss_tolerance.py
    )

    @property
    def unsupported(self) -> list[str]:
        return sorted(set(WORKLOAD_KNOBS) - self.supports)

    def fit(self, cfg: TrainConfig, section: str = "") -> TrainConfig:
        """`cfg` counting this workload's units per example (with_units)."""
        return with_units(cfg, self.units_per_example or cfg.seq_len, self.unit, self.spec, section)


def check_workload(cfg: TrainConfig, section: str = "", workload: Any = None) -> WorkloadInfo:
    """Loads the workload (or takes `workload`, loaded already) and checks it as the loop will use it, on
    the meta device where it builds the model (no memory, no compute); ConfigError (one line, naming the
    method) on the first problem."""
    if cfg.workload == "hybrid":
        # its compile_regions are its blocks, n_layers of them: known without building it
        check_checkpointing(cfg.activation_checkpointing, HybridConfig(**cfg.model).n_layers, section)
        info = WorkloadInfo(
            spec="hybrid", description="the hybrid RWKV6+Mamba2 LM", supports=HybridLMWorkload.supports
        )
        info.fit(cfg, section)
        return info
    spec = parse_spec(cfg.workload)
    job = as_job(workload if workload is not None else load_workload(cfg, section), cfg)
    name = spec.text
    _check_methods(job, name)
    check_declared(job, name, section)
    supports = _check_supports(job, cfg, name, section)
    batch = _first_batch(job, name)
    check_counted(job, batch, name, section)
    _check_model_and_loss(job, batch, name, section)
    root = spec.code_root
    info = WorkloadInfo(
        spec=name,
        description=job.describe(),
        supports=supports,
        code_root=str(root) if needs_path(root) else None,
        unit=job.unit,
        units_per_example=None if job.units_per_example == cfg.seq_len else job.units_per_example,
        reads_corpus=job.reads_corpus,
        loss_tolerance=declared_tolerance(job.workload, name),
    )
    info.fit(cfg, section)
    return info


def _check_methods(job: Job, name: str) -> None:
    w = job.workload
    need = ["loss"] + ([] if job.gives_dataset else ["train_batches", "val_batches"])
    for method in need:
        if not callable(getattr(w, method, None)):
            hint = " (or give train_dataset() and let the loop batch it)" if method != "loss" else ""
            raise ConfigError(f"workload {name!r}: {type(w).__name__} has no method {method}(){hint}")
    for method in OPTIONAL_METHODS:
        if getattr(w, method, None) is not None and not callable(getattr(w, method)):
            raise ConfigError(f"workload {name!r}: {type(w).__name__}.{method} is not a method")


def _check_supports(job: Job, cfg: TrainConfig, name: str, section: str) -> frozenset[str]:
    declared = set(getattr(job.workload, "supports", ()))
    if "activation_checkpointing" in declared:  # the contract before the loop applied it: it would run twice
        raise ConfigError(
            f"workload {name!r}: supports names 'activation_checkpointing', which the loop applies to the "
            "blocks compile_regions(model) names: leave it out of supports and do not apply it yourself"
        )
    if declared - set(WORKLOAD_KNOBS):
        raise ConfigError(
            f"workload {name!r}: supports names {sorted(declared - set(WORKLOAD_KNOBS))}, not knobs a workload "
            f"implements ({', '.join(WORKLOAD_KNOBS)})"
        )
    if job.gives_dataset:
        _check_dataset(job.train_set(), "train_dataset", name)
        if job.val_set() is not None:
            _check_dataset(job.val_set(), "val_dataset", name)
    supports = job.supports
    defaults = TrainConfig.model_fields
    for knob in sorted(set(WORKLOAD_KNOBS) - supports):
        if getattr(cfg, knob) != defaults[knob].default:
            key = ".".join(filter(None, (section, knob)))
            why = f": {job.no_device_loader()}" if knob == "loader" and job.gives_dataset else ""
            raise ConfigError(
                f"config key {key!r}: {getattr(cfg, knob)!r} does nothing for workload {name!r}, which does "
                f"not implement {WORKLOAD_KNOBS[knob]}{why} (leave it at {defaults[knob].default!r})"
            )
    return supports


def _check_dataset(dataset: Any, method: str, name: str) -> None:
    if not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
        raise ConfigError(
            f"workload {name!r}: {method}() returned {type(dataset).__name__}, expected a map-style "
            "torch Dataset (with __len__ and __getitem__)"
        )
    if len(dataset) < 2:
        raise ConfigError(f"workload {name!r}: {method}() returned a dataset of {len(dataset)} examples")


def _first_batch(job: Job, name: str) -> Batch:
    cpu = torch.device("cpu")
    if job.gives_dataset:
        return default_collate([job.train_set()[0], job.train_set()[1]])
    batches = job.train_batches(cpu)
    if not isinstance(batches, Iterator):
        raise ConfigError(
            f"workload {name!r}: train_batches() returned {type(batches).__name__}, expected an iterator "
            "(a generator: yield the batches)"
        )
    return next(batches)


def _check_model_and_loss(job: Job, batch: Batch, name: str, section: str) -> None:
    """build_model, loss and metrics: their types, and activation_checkpointing against the blocks it names.
    On the meta device first (no memory, no compute); where the model or its forward cannot run there (a
    loss that calls .item() cannot), the model is built for real on the CPU and given two examples. What
    cannot run on the CPU either is left to the run itself (only a wrong type is refused; the loop checks
    the blocks again as it checkpoints them)."""
    try:
        with torch.device("meta"):
            model = job.build_model()
    except Exception:  # noqa: BLE001 - not buildable on meta: built for real below
        model = None
    if model is not None:
        _check_built(job, model, name, section)
        if checked_forward(job, model, batch, torch.device("meta"), name):
            return
    try:
        model = job.build_model()
    except Exception:  # noqa: BLE001 - not buildable on this CPU: the run itself will tell
        return
    _check_built(job, model, name, section)
    checked_forward(job, model, first_examples(batch, 2), torch.device("cpu"), name)


def _check_built(job: Job, model: Any, name: str, section: str) -> None:
    if not isinstance(model, nn.Module):
        raise ConfigError(
            f"workload {name!r}: build_model() returned {type(model).__name__}, expected a torch.nn.Module"
        )
    if job.cfg.activation_checkpointing and job.names_blocks:
        check_checkpointing(job.cfg.activation_checkpointing, len(job.compile_regions(model)), section)
    try:
        job.flops_per_token(model)  # a count that is no positive number: refused here, before any work
    except ConfigError:
        raise
    except Exception:  # noqa: BLE001 - a count the meta model cannot give: the run itself will tell
        pass


if __name__ == "__main__":  # regenerates docs/workloads.md's table: python -m trainables.workloads.workload
    from trainables.workloads.workload_fields import fields_markdown

    print(fields_markdown(), end="")
