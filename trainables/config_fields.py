"""TrainConfig's fields, grouped by what they are to the search (their `KnobClass`): the knobs that change
what is trained (`LossKnobs`), those that change only how it runs (`ExecutionKnobs`) and the run's own
settings (`RunSettings`). TrainConfig (trainables/config.py) inherits all three; they are not used alone.

Each field still declares its class on itself (tuner/space/knobs.py reads it there); the group it sits in must
agree, and a test holds them to it.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, ValidationInfo, field_validator

from model import HybridConfig
from trainables.micro_batches import forwards_per_step, splits

Precision = Literal["fp32", "tf32", "bf16", "fp16"]
CompileMode = Literal["none", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]
CompileScope = Literal["model", "blocks"]
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")  # the compile modes that capture CUDA graphs
Kernels = Literal["torch", "fused", "auto"]
Loader = Literal["dataloader", "device"]
LrScaling = Literal["none", "sqrt", "linear"]
MAX_PROFILE_STEPS = 200  # the profiler keeps every event in memory: a summary needs a few steps, not a run
# HybridConfig fields a config's `model:` may not set: the loop derives them from the run.
_DERIVED_MODEL_FIELDS = frozenset({"vocab_size", "kernels", "seq_len", "activation_checkpointing"})


def graphs_overwrite(compile_mode: str, forwards: int) -> str | None:
    """Why a compile mode that captures CUDA graphs cannot run `forwards` passes per optimizer step, or None:
    CUDA graph trees overwrite a pass's outputs with the next's before the backward reads them, an open
    PyTorch bug (pytorch/pytorch#169545; hit by the 94M hybrid's screen: batch 32 in pieces of 8,
    reduce-overhead)."""
    if compile_mode not in CUDA_GRAPH_MODES or forwards <= 1:
        return None
    return (
        f"{compile_mode} captures CUDA graphs, which overwrite a forward pass's outputs with the next's when "
        f"an optimizer step makes {forwards} (micro_batch, grad_accum): use default or "
        "max-autotune-no-cudagraphs, or one pass per step (pytorch/pytorch#169545)"
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class KnobClass:
    """What a TrainConfig field is to the search, declared on the field (`Annotated[type, KnobClass(...)]`)
    so every list that tells knobs apart is derived from here (tuner/space/knobs.py). `kind`: "loss" changes what
    is trained (one loss run per distinct set of these), "execution" only how it runs (a loss run stands
    for every config that differs only in these), "run" is bookkeeping or a cap, never judged. `graph`: it
    changes the graph torch.compile builds. `needs`: (value, capability) pairs, a value that runs only where
    the trials' hardware has "cuda", "bf16" or "fused" (tuner/space/domains.py drops it elsewhere, saying `why`).
    `cuda_only`: (value, instead) pairs, a value that cannot do what it asks without CUDA (most of `needs`
    still runs there, only slower or to no effect): a run set to one is refused on a machine without CUDA
    before any work, told to use `instead` (trainables/preflight.py). `placement`: where a run is placed or
    its files go, not what it trains or measures: left out of a run's identity (tuner/runs/request.py)."""

    kind: Literal["loss", "execution", "run"]
    graph: bool = False
    placement: bool = False
    needs: tuple[tuple[Any, str], ...] = ()
    why: str = ""
    cuda_only: tuple[tuple[Any, Any], ...] = ()


LOSS, EXECUTION, RUN = KnobClass(kind="loss"), KnobClass(kind="execution"), KnobClass(kind="run")
PLACE = KnobClass(kind="run", placement=True)
LOSS_GRAPH = KnobClass(kind="loss", graph=True)
EXECUTION_GRAPH = KnobClass(kind="execution", graph=True)


class LossKnobs(BaseModel):
    """The knobs that change what is trained: one loss run per distinct set of them."""

    # --- what is trained, on what ---
    workload: Annotated[str, LOSS_GRAPH] = Field(
        "hybrid",
        description="'hybrid' (the built-in LM), 'path/to/job.py:function' (a relative path from a config "
        "file is read from that file's folder; from --set, from the working directory) or "
        "'package.module:function': the factory of a Workload (trainables/workloads/workload.py)",
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
    units_per_example: Annotated[int | None, LOSS] = Field(
        None,
        gt=0,
        description="the workload's units (its `unit`: tokens, images, ...) in one example, what tokens, "
        "eval_tokens and the speeds count; None = seq_len, a language model's tokens per window. The "
        "workload declares it (trainables/workloads/workload.py); the checks before any work set it here",
    )

    # --- budget and evals ---
    tokens: Annotated[int, LOSS] = Field(
        5000 * 8 * 256, gt=0, description="training budget in the workload's units (tokens for an LM)"
    )
    eval_interval: Annotated[int, LOSS] = Field(
        500, ge=0, description="optimizer steps between val evals; 0 = only at the end"
    )
    eval_tokens: Annotated[int, LOSS] = Field(
        64 * 256, gt=0, description="val units (tokens for an LM) per eval (fixed examples)"
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

    # --- numerics and init ---
    precision: Annotated[
        Precision,
        KnobClass(
            kind="loss",
            graph=True,
            needs=(("tf32", "cuda"), ("bf16", "bf16")),
            why="no CUDA tensor cores / no native bf16 here",
        ),
    ] = "fp32"
    seed: Annotated[int, LOSS] = 1337

    @field_validator("model")
    @classmethod
    def _model_fields(cls, v: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        if info.data.get("workload", "hybrid") != "hybrid":
            return v  # a workload of the user's own checks its settings (trainables/workloads/workload.py)
        known = {f.name for f in dataclasses.fields(HybridConfig)} - _DERIVED_MODEL_FIELDS
        for key in v:
            if key not in known:
                raise ValueError(f"unknown model key {key!r} (allowed: {', '.join(sorted(known))})")
        HybridConfig(**v)  # value checks (ValueError / TypeError name the field)
        return v


class ExecutionKnobs(BaseModel):
    """The knobs that change only how a run executes: a loss run stands for every config that differs from
    it only in these."""

    micro_batch: Annotated[int | None, EXECUTION_GRAPH] = Field(
        None,
        gt=0,
        description="at most this many sequences per forward/backward pass: each batch of batch_size is "
        "cut into pieces of micro_batch whose gradients add up to the batch's, so the data, the tokens "
        "per step and the loss stay batch_size's (a speed and memory knob); below batch_size it must "
        "divide it; None (or batch_size and above) = the whole batch in one pass",
    )
    fused_adamw: Annotated[bool, EXECUTION] = False
    compile: Annotated[
        CompileMode,
        KnobClass(
            kind="execution",
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
            kind="execution",
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
        KnobClass(
            kind="execution", needs=((True, "cuda"),), why="pinned memory only helps host-to-GPU copies"
        ),
    ] = False
    activation_checkpointing: Annotated[int, EXECUTION_GRAPH] = Field(
        0,
        ge=0,
        description="k: recompute every k-th of the workload's blocks (compile_regions(model); the k-th, "
        "2k-th, ...) in the backward pass instead of keeping its activations, for less memory (a larger "
        "batch fits) at the cost of one more forward of those blocks; 0 = off, 1 = every block (true / "
        "false read as 1 / 0); at most the number of blocks",
    )

    @field_validator("micro_batch")
    @classmethod
    def _divides_the_batch(cls, v: int | None, info: ValidationInfo) -> int | None:
        batch = info.data.get("batch_size")  # a LossKnobs field, validated first; absent when refused
        if batch is None or splits(batch, v):
            return v
        fits = [d for d in range(1, batch) if batch % d == 0]
        raise ValueError(f"must divide batch_size {batch} (one of {fits}) or be at least it")

    @field_validator("compile")
    @classmethod
    def _one_pass_under_cuda_graphs(cls, v: str, info: ValidationInfo) -> str:
        batch = info.data.get("batch_size")  # LossKnobs' fields and micro_batch are validated first
        if batch is None or "micro_batch" not in info.data:
            return v
        forwards = forwards_per_step(batch, info.data["micro_batch"], info.data.get("grad_accum", 1))
        if why := graphs_overwrite(v, forwards):
            raise ValueError(why)
        return v


class RunSettings(BaseModel):
    """The run's own settings: bookkeeping, caps, where it runs; never judged."""

    workload_path: Annotated[str | None, PLACE] = Field(
        None,
        description="folder put on sys.path to import a 'package.module:function' workload (a search sets "
        "it where its driver found the module, so best.yaml runs from anywhere)",
    )
    max_steps: Annotated[int | None, RUN] = Field(
        None,
        gt=0,
        description="run exactly this many optimizer steps, whatever the token budget (speed screens)",
    )
    device: Annotated[str, PLACE] = Field("auto", description="auto | cpu | cuda | cuda:N")
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
    gpu_memory_fraction: Annotated[float | None, PLACE] = Field(
        None, gt=0, le=1, description="cap for a shared GPU"
    )
    memory_cap_mb: Annotated[int | None, PLACE] = Field(
        None, gt=0, description="hard memory cap (CUDA fraction or CPU rlimit)"
    )
    compile_cache: Annotated[str | None, PLACE] = Field(
        None,
        description="root of the compile caches: Inductor's and Triton's (kernels, autotune results) go to "
        "a subdir per device and software version (<root>/<key>/, key.json says what it stands for; "
        "python -m tuner.state.caches lists and clears them). A search's best.yaml names the search's, so its run "
        "reuses the kernels the search compiled; None = the environment's / torch's default",
    )
    cpu_threads: Annotated[int | None, PLACE] = Field(
        None,
        ge=1,
        description="torch's CPU (intra-op) threads; None = torch's default. A search's best.yaml gives its "
        "trials' count: on a busy host, dozens of threads spinning between a GPU run's small CPU ops slowed "
        "its steps 2.4x (docs/benchmarks.md)",
    )
    compile_threads: Annotated[int | None, PLACE] = Field(
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
        "share of a step, the top ops; trainables/training/profile.py); they are neither timed nor counted, and a "
        "saved model is saved before them; 0 = off",
    )
    out_dir: Annotated[str | None, PLACE] = Field(
        None, description="write tokenizer, config and metrics here"
    )
    save_model: Annotated[bool, RUN] = False

    @field_validator("device")
    @classmethod
    def _device_form(cls, v: str) -> str:
        if v in ("auto", "cpu", "cuda") or (v.startswith("cuda:") and v[5:].isdigit()):
            return v
        raise ValueError("must be auto, cpu, cuda or cuda:N")
