"""The training job's configuration: every knob the tuner can search is one field here.

A knob is added in one place (this model, its class declared on the field: `KnobClass`) and becomes
searchable by naming it in a search-space YAML.
Validation happens before any expensive work and fails with one line that names the key and what is
allowed (`ConfigError`); the CLIs turn that into exit code 2.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from model import HybridConfig

Precision = Literal["fp32", "tf32", "bf16", "fp16"]
CompileMode = Literal["none", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]
CompileScope = Literal["model", "blocks"]
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")  # the compile modes that capture CUDA graphs
Kernels = Literal["torch", "fused", "auto"]
Loader = Literal["dataloader", "device"]
LrScaling = Literal["none", "sqrt", "linear"]
MAX_PROFILE_STEPS = 200  # the profiler keeps every event in memory: a summary needs a few steps, not a run

# Sections of a search config (tuner YAML) that the training CLI leaves to the tuner.
TUNER_SECTIONS = ("search", "quality", "resources", "budget")


@dataclasses.dataclass(frozen=True)
class KnobClass:
    """What a TrainConfig field is to the search, declared on the field (`Annotated[type, KnobClass(...)]`)
    so every list that tells knobs apart is derived from here (tuner/knobs.py). `kind`: "loss" changes what
    is trained (one loss run per distinct set of these), "execution" only how it runs (a loss run stands
    for every config that differs only in these), "run" is bookkeeping or a cap, never judged. `graph`: it
    changes the graph torch.compile builds. `needs`: (value, capability) pairs, a value that runs only where
    the trials' hardware has "cuda", "bf16" or "fused" (tuner/space.py drops it elsewhere, saying `why`).
    `cuda_only`: (value, instead) pairs, a value that cannot do what it asks without CUDA (most of `needs`
    still runs there, only slower or to no effect): a run set to one is refused on a machine without CUDA
    before any work, told to use `instead` (trainables/preflight.py)."""

    kind: Literal["loss", "execution", "run"]
    graph: bool = False
    needs: tuple[tuple[Any, str], ...] = ()
    why: str = ""
    cuda_only: tuple[tuple[Any, Any], ...] = ()


LOSS, EXECUTION, RUN = KnobClass("loss"), KnobClass("execution"), KnobClass("run")
LOSS_GRAPH, EXECUTION_GRAPH = KnobClass("loss", graph=True), KnobClass("execution", graph=True)


class ConfigError(ValueError):
    """A bad configuration value; its message is one line that names the key."""


class TrainConfig(BaseModel):
    """Defaults reproduce the seed ("RwMBA" V4): batch 8, fp32, eager, AdamW, 5000 steps of 8x256 tokens."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    # --- workload ---
    workload: Annotated[str, LOSS_GRAPH] = Field(
        "hybrid",
        description="'hybrid' (the built-in LM), 'path/to/job.py:function' (a relative path from a config "
        "file is read from that file's folder; from --set, from the working directory) or "
        "'package.module:function': the factory of a Workload (trainables/workload.py)",
    )
    workload_path: Annotated[str | None, RUN] = Field(
        None,
        description="folder put on sys.path to import a 'package.module:function' workload (a search sets "
        "it where its driver found the module, so best.yaml runs from anywhere)",
    )
    model: Annotated[dict[str, Any], LOSS_GRAPH] = Field(
        default_factory=dict,
        description="the model's settings: HybridConfig overrides for the hybrid; for a workload of your "
        "own, passed to its factory as given (checked by the schema it declares)",
    )
    data: Annotated[str | None, LOSS] = Field(
        None, description="corpus file or folder; None = TUNER_DATA / cache / download / embedded"
    )
    data_sha256: Annotated[str | None, LOSS] = Field(
        None,
        description="sha256 of the corpus text a run must train on; the search sets it so that every "
        "node of a cluster trains on the text its driver resolved (None = no check)",
    )
    seq_len: Annotated[int, LOSS_GRAPH] = Field(256, gt=1)

    # --- budget ---
    tokens: Annotated[int, LOSS] = Field(5000 * 8 * 256, gt=0, description="training token budget")
    max_steps: Annotated[int | None, RUN] = Field(
        None,
        gt=0,
        description="run exactly this many optimizer steps, whatever the token budget (speed screens)",
    )
    eval_interval: Annotated[int, LOSS] = Field(
        500, ge=0, description="optimizer steps between val evals; 0 = only at the end"
    )
    eval_tokens: Annotated[int, LOSS] = Field(
        64 * 256, gt=0, description="val tokens per eval (fixed windows)"
    )
    eval_batch_size: Annotated[int, LOSS] = Field(16, gt=0)

    # --- optimisation (seed schedule) ---
    batch_size: Annotated[int, LOSS_GRAPH] = Field(
        8,
        gt=0,
        description="sequences per batch (a forward takes them all, or micro_batch of them at a time)",
    )
    grad_accum: Annotated[int, LOSS] = Field(
        1,
        gt=0,
        description="batches of batch_size per optimizer step, each drawn anew (the effective batch is "
        "batch_size x grad_accum, what the loss and lr_scaling see); for memory use micro_batch, which "
        "keeps the data",
    )
    micro_batch: Annotated[int | None, EXECUTION_GRAPH] = Field(
        None,
        gt=0,
        description="at most this many sequences per forward/backward pass: each batch of batch_size is "
        "cut into pieces of micro_batch whose gradients add up to the batch's, so the data, the tokens "
        "per step and the loss stay batch_size's (a speed and memory knob); below batch_size it must "
        "divide it; None (or batch_size and above) = the whole batch in one pass",
    )
    lr: Annotated[float, LOSS] = Field(3e-4, gt=0)
    min_lr: Annotated[float, LOSS] = Field(3e-5, ge=0)
    lr_scaling: Annotated[LrScaling, LOSS] = "none"
    lr_base_batch: Annotated[int, LOSS] = Field(
        8, gt=0, description="effective batch at which lr applies unscaled"
    )
    warmup_frac: Annotated[float, LOSS] = Field(
        0.1, ge=0, lt=1, description="share of the token budget spent warming up"
    )
    mamba_lr_mult: Annotated[float, LOSS] = Field(2.0, gt=0)
    weight_decay: Annotated[float, LOSS] = Field(0.1, ge=0)
    beta1: Annotated[float, LOSS] = Field(0.9, ge=0, lt=1)
    beta2: Annotated[float, LOSS] = Field(0.95, ge=0, lt=1)
    grad_clip: Annotated[float, LOSS] = Field(1.0, ge=0, description="0 = off")
    fused_adamw: Annotated[bool, EXECUTION] = False

    # --- speed knobs ---
    precision: Annotated[
        Precision,
        KnobClass(
            "loss",
            graph=True,
            needs=(("tf32", "cuda"), ("bf16", "bf16")),
            why="no CUDA tensor cores / no native bf16 here",
        ),
    ] = "fp32"
    compile: Annotated[
        CompileMode,
        KnobClass(
            "execution",
            graph=True,
            needs=tuple((mode, "cuda") for mode in CUDA_GRAPH_MODES),
            why="these modes use CUDA graphs",
            # without CUDA, Inductor skips the graphs: the run is the mode below, after a long CPU compile
            cuda_only=(("reduce-overhead", "default"), ("max-autotune", "max-autotune-no-cudagraphs")),
        ),
    ] = "none"
    compile_scope: Annotated[CompileScope, EXECUTION_GRAPH] = Field(
        "model",
        description="what torch.compile compiles: 'model' (the whole model as one graph) or 'blocks' (each "
        "of the workload's repeated blocks on its own, regional compilation: equal blocks share one "
        "compiled graph, so a cold compile costs a fraction; the workload names its blocks with "
        "compile_regions(model)); no effect with compile: none",
    )
    kernels: Annotated[
        Kernels,
        KnobClass(
            "execution",
            graph=True,
            needs=(("fused", "fused"), ("auto", "cuda")),
            why="fused kernels need CUDA with fla and mamba_ssm importable",
            cuda_only=(("fused", "torch"),),  # 'auto' runs the torch reference where fused cannot
        ),
    ] = "torch"
    loader: Annotated[Loader, EXECUTION] = "dataloader"
    num_workers: Annotated[int, EXECUTION] = Field(0, ge=0)
    pin_memory: Annotated[
        bool,
        KnobClass("execution", needs=((True, "cuda"),), why="pinned memory only helps host-to-GPU copies"),
    ] = False
    activation_checkpointing: Annotated[int, EXECUTION_GRAPH] = Field(
        0,
        ge=0,
        description="k: recompute every k-th of the workload's blocks (compile_regions(model); the k-th, "
        "2k-th, ...) in the backward pass instead of keeping its activations, for less memory (a larger "
        "batch fits) at the cost of one more forward of those blocks; 0 = off, 1 = every block (true / "
        "false read as 1 / 0); at most the number of blocks",
    )

    # --- run ---
    seed: Annotated[int, LOSS] = 1337
    device: Annotated[str, RUN] = Field("auto", description="auto | cpu | cuda | cuda:N")
    timing_warmup_steps: Annotated[int, RUN] = Field(
        5, ge=1, description="steps excluded from steady-state timing"
    )
    log_interval: Annotated[int, RUN] = Field(
        50, gt=0, description="optimizer steps between progress lines / NaN checks"
    )
    compile_deadline_s: Annotated[float | None, RUN] = Field(
        None,
        gt=0,
        description="give up (status timeout) when the first step, which compiles, takes longer (speed screens)",
    )
    progress_s: Annotated[float, RUN] = Field(
        20.0, gt=0, description="at most this many seconds between progress lines"
    )
    gpu_memory_fraction: Annotated[float | None, RUN] = Field(
        None, gt=0, le=1, description="cap for a shared GPU"
    )
    memory_cap_mb: Annotated[int | None, RUN] = Field(
        None, gt=0, description="hard memory cap (CUDA fraction or CPU rlimit)"
    )
    compile_cache: Annotated[str | None, RUN] = Field(
        None,
        description="root of the compile caches: Inductor's and Triton's (kernels, autotune results) go to "
        "a subdir per device and software version (<root>/<key>/, key.json says what it stands for; "
        "python -m tuner.caches lists and clears them). A search's best.yaml names the search's, so its run "
        "reuses the kernels the search compiled; None = the environment's / torch's default",
    )
    cpu_threads: Annotated[int | None, RUN] = Field(
        None,
        ge=1,
        description="torch's CPU (intra-op) threads; None = torch's default. A search's best.yaml gives its "
        "trials' count: on a busy host, dozens of threads spinning between a GPU run's small CPU ops slowed "
        "its steps 2.4x (docs/benchmarks.md, run N)",
    )
    compile_threads: Annotated[int | None, RUN] = Field(
        None,
        ge=1,
        description="Inductor's compile workers; None = Inductor's default (or TORCHINDUCTOR_COMPILE_THREADS, "
        "which wins); a search's best.yaml gives its trials' count",
    )
    profile_steps: Annotated[int, RUN] = Field(
        0,
        ge=0,
        le=MAX_PROFILE_STEPS,
        description="after the timed window, train this many more steps under torch.profiler and sum up "
        "where a step's time goes (the result's profile: compute, memory or launch bound, the device's busy "
        "share of a step, the top ops; trainables/profile.py); they are neither timed nor counted, and a "
        "saved model is saved before them; 0 = off",
    )
    out_dir: Annotated[str | None, RUN] = Field(None, description="write tokenizer, config and metrics here")
    save_model: Annotated[bool, RUN] = False

    @field_validator("device")
    @classmethod
    def _device_form(cls, v: str) -> str:
        if v in ("auto", "cpu", "cuda") or (v.startswith("cuda:") and v[5:].isdigit()):
            return v
        raise ValueError("must be auto, cpu, cuda or cuda:N")

    @field_validator("micro_batch")
    @classmethod
    def _divides_the_batch(cls, v: int | None, info: ValidationInfo) -> int | None:
        batch = info.data.get("batch_size")  # absent when batch_size itself was refused
        if v is None or batch is None or v >= batch or batch % v == 0:
            return v
        fits = [d for d in range(1, batch) if batch % d == 0]
        raise ValueError(f"must divide batch_size {batch} (one of {fits}) or be at least it")

    @field_validator("model")
    @classmethod
    def _model_fields(cls, v: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        if info.data.get("workload", "hybrid") != "hybrid":
            return v  # a workload of the user's own checks its settings (trainables/workload.py)
        known = {f.name for f in dataclasses.fields(HybridConfig)} - {
            "vocab_size",
            "kernels",
            "seq_len",
            "activation_checkpointing",
        }
        for key in v:
            if key not in known:
                raise ValueError(f"unknown model key {key!r} (allowed: {', '.join(sorted(known))})")
        HybridConfig(**v)  # value checks (ValueError / TypeError name the field)
        return v

    # --- derived ---
    @classmethod
    def knob_classes(cls) -> dict[str, KnobClass | None]:
        """Each field's declared class, in field order (None: not declared; a test keeps there being none)."""
        return {
            name: next((m for m in field.metadata if isinstance(m, KnobClass)), None)
            for name, field in cls.model_fields.items()
        }

    @property
    def forward_batch(self) -> int:
        """Sequences per forward/backward pass, what must fit in memory: the micro-batch, or the batch."""
        return min(self.micro_batch or self.batch_size, self.batch_size)

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.grad_accum * self.seq_len

    @property
    def total_steps(self) -> int:
        # max_steps wins over the budget both ways: a speed screen must reach its steady phase even
        # when the budget is only a few large-batch steps.
        return self.max_steps or -(-self.tokens // self.tokens_per_step)

    @property
    def schedule_steps(self) -> int:
        """Steps the lr schedule spans: the whole token budget, even when max_steps cuts the run short."""
        return -(-self.tokens // self.tokens_per_step)

    def peak_lr(self) -> float:
        ratio = self.batch_size * self.grad_accum / self.lr_base_batch
        return self.lr * {"none": 1.0, "sqrt": ratio**0.5, "linear": ratio}[self.lr_scaling]

    def hybrid_config(self, vocab_size: int) -> HybridConfig:
        return HybridConfig(
            **self.model,
            vocab_size=vocab_size,
            seq_len=self.seq_len,
            kernels=self.kernels,  # activation_checkpointing is the loop's, over the workload's blocks
        )


def unknown_key(key: str, allowed: Iterable[str], section: str = "") -> str:
    """The one line for an unknown key: the closest allowed one and all of them, named as the user writes
    them (`section` is where they live: '' for the top level, 'train', 'search', ...)."""
    allowed = list(allowed)
    close = difflib.get_close_matches(key.rpartition(".")[2], allowed, n=1)
    hint = f"; did you mean {'.'.join(filter(None, (section, close[0])))!r}?" if close else ""
    where = f" in {section}" if section else ""
    listed = f" (allowed{where}: {', '.join(allowed)})" if allowed else ""
    return f"unknown config key {key!r}{hint}{listed}"


def _one_line(err: ValidationError, section: str = "") -> str:
    first = err.errors()[0]
    loc = [str(p) for p in first["loc"]]
    key = ".".join([section, *loc] if section else loc) or "config"
    if first["type"] == "extra_forbidden":
        return unknown_key(key, TrainConfig.model_fields, section)
    msg = first["msg"].removeprefix("Value error, ")
    return f"config key {key!r}: {msg} (got {first.get('input')!r})"


def make_config(values: dict[str, Any], section: str = "") -> TrainConfig:
    """The validated training config; a bad key's message names it under `section` (a search config's
    'train'), as its user writes it."""
    try:
        return TrainConfig(**values)
    except ValidationError as err:
        raise ConfigError(_one_line(err, section)) from None
    except TypeError as err:  # HybridConfig(**model) with a bad key type
        key = ".".join(filter(None, (section, "model")))
        raise ConfigError(f"config key {key!r}: {err}") from None


def apply_overrides(values: dict[str, Any], items: list[str]) -> dict[str, Any]:
    """Apply `key=value` pairs (values parsed as YAML); a dotted key addresses a nested one
    (model.d_model=64) and its value replaces what was there, mappings included."""
    out = copy.deepcopy(values)
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set expects key=value, got {item!r}")
        try:
            value = yaml.safe_load(raw) if raw else ""
        except yaml.YAMLError:
            value = raw
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {key}: {part!r} is not a section")
        node[leaf] = value
    return out


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A config file's mapping; ConfigError (one line) for anything that is not one: a missing file, a
    folder, a file that cannot be read, binary data, bad YAML. The one place a config file is read."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"config file {path} is a directory (name a YAML file)")
    if not path.exists():
        raise ConfigError(f"config file not found: {path}")
    if not path.is_file():
        raise ConfigError(f"config file {path} is not a regular file (name a YAML file)")
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as err:
        raise ConfigError(f"cannot read config file {path}: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"config file {path} is not UTF-8 text (byte {err.start}: {err.reason}); name a YAML file"
        ) from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]  # a ReaderError has no problem
        raise ConfigError(f"bad YAML in {path}{where}: {problem}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping of config keys")
    return data


def training_section(data: dict[str, Any]) -> dict[str, Any]:
    """A search config keeps the training job under `train:`; a plain training config is flat."""
    if "train" in data:
        section = data["train"] or {}
        if not isinstance(section, dict):
            raise ConfigError("config key 'train' must be a mapping")
        return section
    return {k: v for k, v in data.items() if k not in TUNER_SECTIONS}


def is_file_spec(workload: str) -> bool:
    """'path/to/job.py:function' (a file) as opposed to 'package.module:function'."""
    target = workload.rpartition(":")[0]
    return target.endswith(".py") or "/" in target or "\\" in target


def absolute(workload: str, base: Path) -> str:
    """A file workload with its path made absolute against `base`; any other as it is."""
    if workload == "hybrid" or not is_file_spec(workload):
        return workload
    target, _, attr = workload.rpartition(":")
    return f"{(base / Path(target).expanduser()).resolve()}:{attr}"


def with_workload_paths(values: dict[str, Any], base: Path) -> dict[str, Any]:
    """`values` (a training section) with a relative workload file and workload_path made absolute against
    `base`: a config file's folder for what the file says, the working directory for --set."""
    out = dict(values)
    if isinstance(out.get("workload"), str):
        out["workload"] = absolute(out["workload"], base)
    if isinstance(out.get("workload_path"), str):
        out["workload_path"] = str((base / Path(out["workload_path"]).expanduser()).resolve())
    return out


def load_config(path: str | Path | None, overrides: list[str] = (), data: str | None = None) -> TrainConfig:
    values = with_workload_paths(training_section(read_yaml(path)), Path(path).parent) if path else {}
    values = with_workload_paths(apply_overrides(values, list(overrides)), Path.cwd())
    if data is not None:
        values["data"] = data
    return make_config(values)


def dump_config(cfg: TrainConfig, path: str | Path, leave_out: Iterable[str] = ()) -> None:
    """The config as YAML; `leave_out`: knobs its workload does not implement (their defaults stand)."""
    Path(path).write_text(yaml.safe_dump(cfg.model_dump(exclude=set(leave_out)), sort_keys=False))
