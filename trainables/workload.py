"""What the training loop trains: a model, its data and its loss.

The hybrid LM is the built-in default workload, not a special case of the loop. A user's own PyTorch job
plugs in by naming a factory, `train.workload: "path/to/job.py:make_workload"` (or "package.module:fn"),
that returns an object with the methods below. The least it writes is three:

    build_model()                  -> nn.Module
    loss(model, batch)             -> scalar tensor, the batch's MEAN loss
    train_dataset()                -> a map-style torch Dataset of examples; the loop batches it (batch_size
                                      examples a step, seeded) and applies loader / num_workers / pin_memory
                                      (loader=device where the dataset allows: trainables/datasets.py)
      or train_batches(device, start_step) -> endless iterator of batches (then also val_batches)

Everything else has a default:

    val_dataset()                  the fixed val examples (default: the last tenth of train_dataset, held out)
    val_batches(device)            the val batches of a train_batches workload (no default there)
    describe()                     one line for the log (default: the class and where it came from)
    lr_multiplier(param_name)      per-parameter lr factor (default 1.0)
    save(out_dir)                  what a run needs besides the weights, e.g. a tokenizer (default: nothing)
    evaluation(model)              a context manager entered around each eval (default: none)
    compile_regions(model)         its repeated blocks (default: none): the loop compiles them one by one
                                   (compile_scope: blocks) and checkpoints every k-th (activation_checkpointing)
    flops_per_token(model)         training FLOPs per token, forward + backward, for the report's MFU
                                   (default: 6 x trainable parameters, said as such: trainables/flops.py)
    loss_tolerance                 ("relative", 0.05) or ("absolute", 0.02): the loss rule's tolerance for
                                   its loss's scale, where the search config sets none (default: 0.05
                                   absolute; trainables/loss_tolerance.py)
    supports                       the workload knobs it implements, of WORKLOAD_KNOBS (default: none; a
                                   Dataset workload gets the loader knobs from the loop); it reads their
                                   values from the TrainConfig its factory was given (cfg.kernels, ...)
    unit                           what it counts, plural: "images", "examples" (default "tokens"); every
                                   speed line and report says images/s, and tokens / eval_tokens count it
    units_per_example              units in one example (default: seq_len for "tokens", else 1)
    reads_corpus                   True where it trains on the char corpus the search resolves, pins and
                                   ships (load_char_data(cfg.data, expect_sha256=cfg.data_sha256)); default
                                   False: nothing is resolved, and train.data is refused
    metrics(model, batch)          more val figures, {"accuracy": ...}, each the batch's mean (a float or a
                                   scalar tensor), averaged over the val examples (default: none)

The factory takes the TrainConfig, and, when it has a second parameter, the model's settings
(`train.model`): as the mapping given, or validated into that parameter's annotation when it is a
dataclass or a pydantic model (`def make_workload(cfg, model: GPTConfig)`), so
`--set train.model.n_layer=2` reaches the model and a typo is one line. Contracts of the loop: evals run
the uncompiled model in fp32 under torch.no_grad(); a speed counts batch_size x units_per_example units
per batch (the internal names say tokens: tokens_per_s, tokens, eval_tokens, whatever the unit); a batch
is a tensor or a tuple/list/dict of tensors with the batch on dim 0.
`check_workload` checks all this before any expensive work (ConfigError: one line, exit 2).
docs/workloads.md is the user's guide; its table of TrainConfig fields is `python -m trainables.workload`.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
import typing
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from pydantic import BaseModel, TypeAdapter, ValidationError
from torch import nn
from torch.utils.data._utils.collate import default_collate

from model import HybridConfig, HybridLM
from trainables import datasets, flops
from trainables.char_batches import val_window_batches, window_batches
from trainables.config import ConfigError, TrainConfig, unknown_key
from trainables.data import DataError, load_char_data
from trainables.loss_tolerance import declared_tolerance
from trainables.user_code import WorkloadSpec, load_factory, needs_path, parse_spec
from trainables.workload_probe import TOKENS, check_declared, checked_forward, first_examples

Batch = Any  # a tensor, or a tuple / list / dict of tensors, batch on dim 0

# Knobs that work only when the workload implements them; the loop applies every other knob itself.
WORKLOAD_KNOBS = {
    "kernels": "fused kernels",
    "compile_scope": "regional compilation (compile_regions)",
    "activation_checkpointing": "activation checkpointing (compile_regions)",
    "mamba_lr_mult": "per-group lr",
    "loader": "device-resident batches",
    "num_workers": "DataLoader workers",
    "pin_memory": "pinned host memory",
}
LOADER_KNOBS = frozenset({"num_workers", "pin_memory"})  # what the loop applies to any Dataset
# What the loop applies to the blocks a workload names (compile_regions), so a workload offers these by
# naming its blocks, never by declaring them in supports.
REGION_KNOBS = frozenset({"compile_scope", "activation_checkpointing"})
OPTIONAL_METHODS = (
    "val_dataset",
    "describe",
    "lr_multiplier",
    "save",
    "evaluation",
    "flops_per_token",
    "metrics",
)


class Workload(Protocol):
    """The three methods every workload has (the data: `train_dataset` or `train_batches`, see above)."""

    def build_model(self) -> nn.Module: ...

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor: ...


class HybridLMWorkload:
    """The hybrid RWKV6+Mamba2 character LM on a char corpus."""

    supports = frozenset(WORKLOAD_KNOBS)
    reads_corpus = True

    def __init__(self, cfg: TrainConfig):
        if cfg.eval_tokens < cfg.seq_len:  # refused here, before any work, not when the first eval comes
            raise ConfigError(
                f"config key 'eval_tokens': {cfg.eval_tokens} holds no validation window of seq_len "
                f"{cfg.seq_len} tokens (set eval_tokens >= seq_len)"
            )
        self.cfg = cfg
        self.data = load_char_data(cfg.data, expect_sha256=cfg.data_sha256)

    def describe(self) -> str:
        return f"hybrid LM on {self.data.corpus.source}, vocab {self.data.tokenizer.vocab_size}"

    def build_model(self) -> nn.Module:
        return HybridLM(self.cfg.hybrid_config(self.data.tokenizer.vocab_size))

    def train_batches(self, device: torch.device, start_step: int = 0) -> Iterator[Batch]:
        cfg = self.cfg
        return window_batches(
            self.data.train,
            loader=cfg.loader,
            batch_size=cfg.batch_size,
            seq_len=cfg.seq_len,
            seed=cfg.seed,
            device=device,
            num_workers=cfg.num_workers,
            pin_memory=cfg.pin_memory,
            start_step=start_step,
        )

    def val_batches(self, device: torch.device) -> list[Batch]:
        cfg = self.cfg
        return val_window_batches(
            self.data.val,
            seq_len=cfg.seq_len,
            batch_size=cfg.eval_batch_size,
            max_tokens=cfg.eval_tokens,
            device=device,
        )

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        x, y = batch
        return model(x, y)[1]

    def evaluation(self, model: nn.Module) -> AbstractContextManager:
        # The val loss through the reference ops, whatever kernels trained the weights (HybridLM.using_kernels).
        return model.using_kernels("torch") if isinstance(model, HybridLM) else nullcontext()

    def compile_regions(self, model: nn.Module) -> list[nn.Module]:
        # The repeated blocks: compiled one by one they share one graph (HybridLM.blocks are all alike).
        return list(model.blocks)

    def flops_per_token(self, model: nn.Module) -> float:
        # its matmuls and the mixers' state updates, counted from its config (model/hybrid.py)
        return model.config.flops_per_token()

    def lr_multiplier(self, param_name: str) -> float:
        # The seed trains Mamba parameters at twice the base learning rate.
        return self.cfg.mamba_lr_mult if ".mamba." in param_name else 1.0

    def save(self, out_dir: str) -> None:
        self.data.tokenizer.save(f"{out_dir}/tokenizer.json")


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


@dataclass(frozen=True)
class WorkloadInfo:
    """What checking a workload found: what the search needs to know of it."""

    spec: str
    description: str
    supports: frozenset[str]
    code_root: str | None = None  # where its code is imported from, when a run elsewhere needs that folder
    unit: str = TOKENS  # what its speeds and budgets count (plural: tokens, images)
    units_per_example: int | None = None  # None: seq_len (an LM's window)
    reads_corpus: bool = True  # it trains on the corpus the search resolves (and pins, and ships)
    loss_tolerance: tuple[str, float] | None = None  # its (mode, tolerance): trainables/loss_tolerance.py

    @property
    def unsupported(self) -> list[str]:
        return sorted(set(WORKLOAD_KNOBS) - self.supports)

    def fit(self, cfg: TrainConfig, section: str = "") -> TrainConfig:
        """`cfg` counting this workload's units per example (with_units)."""
        return with_units(cfg, self.units_per_example or cfg.seq_len, self.unit, self.spec, section)


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


def check_workload(cfg: TrainConfig, section: str = "", workload: Any = None) -> WorkloadInfo:
    """Loads the workload (or takes `workload`, loaded already) and checks it as the loop will use it, on
    the meta device where it builds the model (no memory, no compute); ConfigError (one line, naming the
    method) on the first problem."""
    if cfg.workload == "hybrid":
        # its compile_regions are its blocks, n_layers of them: known without building it
        check_checkpointing(cfg.activation_checkpointing, HybridConfig(**cfg.model).n_layers, section)
        info = WorkloadInfo("hybrid", "the hybrid RWKV6+Mamba2 LM", HybridLMWorkload.supports)
        info.fit(cfg, section)
        return info
    spec = parse_spec(cfg.workload)
    job = as_job(workload if workload is not None else load_workload(cfg, section), cfg)
    name = spec.text
    _check_methods(job, name)
    check_declared(job, name, section)
    supports = _check_supports(job, cfg, name, section)
    batch = _first_batch(job, name)
    _check_model_and_loss(job, batch, name, section)
    root = spec.code_root
    info = WorkloadInfo(
        name,
        job.describe(),
        supports,
        str(root) if needs_path(root) else None,
        job.unit,
        None if job.units_per_example == cfg.seq_len else job.units_per_example,
        job.reads_corpus,
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


if __name__ == "__main__":  # regenerates docs/workloads.md's table: python -m trainables.workload
    from trainables.workload_fields import fields_markdown

    print(fields_markdown(), end="")
