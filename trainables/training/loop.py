"""The one training loop. It knows nothing of Ray: the Ray trainable and the CLI both call `train()`.

Speed is measured the way the tuner needs it (`trainables.training.timing.StepTimer`): steady-state tokens/s after
`timing_warmup_steps`, compile and warm-up time apart, step-time median and p90, and the wall-clock window
of the steady phase so GPU telemetry can be joined to it. Host-device syncs happen only at log/eval
boundaries so the measurement does not slow what it measures. Peak memory is each run's own, also when a
process trains several times (Ray reuses worker processes).
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import torch

from model import library_env
from model.ops import available_backends, tuning
from trainables.common import progress
from trainables.common.errors import find_cause, first_line
from trainables.config import ConfigError, TrainConfig, dump_config
from trainables.training import compile_cache, memory, profile
from trainables.training.cache_use import CacheCount, stable_cache_keys
from trainables.training.evaluation import eval_figures
from trainables.training.result import RunResult
from trainables.training.step_model import OptimizerStep
from trainables.training.timing import CompileDeadline, FirstStepDeadline, StepTimer
from trainables.workloads import flops
from trainables.workloads.workload import load_workload
from trainables.workloads.workload_job import Job, as_job

Report = Callable[[dict[str, Any]], None]


class NonFiniteLoss(RuntimeError):
    pass


def resolve_device(cfg: TrainConfig) -> torch.device:
    """Environment checks that must fail before any work starts (ConfigError -> exit 2)."""
    if cfg.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(cfg.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"config key 'device': {cfg.device!r} asked for but CUDA is not available")
        if device.index is None:  # a definite index: set_device, memory stats and telemetry need one
            device = torch.device("cuda", torch.cuda.current_device())
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(
                f"config key 'device': {cfg.device!r} but only {torch.cuda.device_count()} GPU(s) are visible"
            )
    if cfg.kernels == "fused":
        if device.type != "cuda":
            raise ConfigError("config key 'kernels': 'fused' needs a CUDA device (allowed here: torch, auto)")
        missing = {
            k: v for k, v in available_backends().items() if k in ("fla", "mamba_ssm") and v is not True
        }
        if missing:
            why = "; ".join(f"{k}: {v}" for k, v in missing.items())
            raise ConfigError(f"config key 'kernels': 'fused' kernels are not importable ({why})")
    if cfg.pin_memory and device.type != "cuda":
        raise ConfigError("config key 'pin_memory': only meaningful with a CUDA device (set it to false)")
    if cfg.precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConfigError("config key 'precision': this GPU has no bf16 (allowed: fp32, tf32, fp16)")
    return device


def lr_at(cfg: TrainConfig, step: int) -> float:
    """Linear warm-up, then cosine down to min_lr over the whole token budget (the seed schedule)."""
    peak, total = cfg.peak_lr(), cfg.schedule_steps
    warm = int(cfg.warmup_frac * total)
    if step < warm:
        return peak * (step + 1) / warm
    progress = min(1.0, (step - warm) / max(1, total - warm))
    floor = min(cfg.min_lr, peak)
    return floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * progress))


def fp32_fused_note(precision: str, kernels: str, on_cuda: bool, triton_f32: str | None) -> str | None:
    """The one-line caveat for fp32 runs through fused Triton kernels, whose fp32 dots default to TF32."""
    if precision != "fp32" or kernels == "torch" or not on_cuda or triton_f32 == "ieee":
        return None
    fused = any(ok is True for name, ok in available_backends().items() if name not in ("naive", "torch"))
    if kernels == "auto" and not fused:
        return None  # auto falls back to the torch ops: no Triton kernels run
    return (
        "note: fused Triton kernels round fp32 matmul inputs to TF32 (SSD gradients ~1.5e-3 from exact "
        "fp32); set TRITON_F32_DEFAULT=ieee before the first compile for exact fp32 (docs/benchmarks.md)"
    )


def _placed(device: torch.device, unit: str) -> RunResult:
    """A run's result before it trains: where it runs, what it counts (the rest is filled in as measured)."""
    return RunResult(
        unit=unit,
        device=str(device),
        gpu=device.index if device.type == "cuda" else None,
        node=platform.node(),
        pid=os.getpid(),
        cpu_count=os.cpu_count(),
        cpu_threads=torch.get_num_threads(),
    )


def first_step_deadline(compile_deadline_s: float | None, autotunes: bool) -> float | None:
    """The first step's deadline: `compile_deadline_s`, plus a cold autotune of the fused kernels where no
    shipped results cover this GPU, so the one process that pays it (once per machine: the results stay in
    the cache root's Triton dir) is not given up on. A later process gets the extension too: whether the
    cache holds this run's shapes is known only as each kernel first runs (Triton keys them by shape)."""
    if compile_deadline_s is None or not autotunes:
        return compile_deadline_s
    return compile_deadline_s + tuning.COLD_AUTOTUNE_S


def use_compile_cache(cfg: TrainConfig) -> None:
    """Points Inductor and Triton at this run's key (device and software) in its cache root: `compile_cache`,
    else the root its search gave it (library_env.search_compile_cache). First thing in a run: they read it
    when they compile, and loading the fused kernels installs their shipped autotune results into Triton's
    dir. A dir the user exported wins over a search's root, not over the config's own `compile_cache`."""
    root = cfg.compile_cache or library_env.search_compile_cache()
    if not root:
        return
    key = compile_cache.CacheKey.here(cfg.device)
    usable = compile_cache.usable_root(Path(root))
    dirs = compile_cache.keyed_dirs(usable, key)
    if not cfg.compile_cache:
        dirs = {name: path for name, path in dirs.items() if name not in library_env.compile_cache_dirs()}
    compile_cache.record_key(usable, key)
    library_env.point_compile_caches(dirs)


def _prepare(cfg: TrainConfig, workload: Job, device: torch.device) -> None:
    if cfg.out_dir:
        Path(cfg.out_dir).mkdir(parents=True, exist_ok=True)
        dump_config(cfg, Path(cfg.out_dir) / "config.yaml")
        workload.save(cfg.out_dir)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    stable_cache_keys()
    memory.reset_peak(device)
    # fp32 means fp32: TF32 tensor cores only when asked for.
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = cfg.precision == "tf32"
    torch.manual_seed(cfg.seed)
    _use_threads(cfg)


def _use_threads(cfg: TrainConfig) -> None:
    """The CPU threads the config names, before anything compiles (Inductor sizes its worker pool at the
    first compile); an exported TORCHINDUCTOR_COMPILE_THREADS wins, as Inductor read it at import."""
    if cfg.cpu_threads:
        torch.set_num_threads(cfg.cpu_threads)
    if cfg.compile_threads and not os.environ.get(library_env.COMPILE_THREADS_VAR):
        import torch._inductor.config as inductor_config

        inductor_config.compile_threads = cfg.compile_threads


def _compile_threads() -> int | None:
    """Inductor's compile workers, where Inductor is loaded (a compiled run); None in an eager run."""
    config = sys.modules.get("torch._inductor.config")
    return getattr(config, "compile_threads", None) if config else None


def _failure(err: Exception, cpu_capped: bool, deadline_s: float | None = None) -> tuple[str, str]:
    """The status and error line of a failed run: timeout, oom, or error with the exception's first line."""
    if find_cause(err, CompileDeadline):
        return "timeout", f"the first step (compile, autotuning) ran over its {deadline_s:g} s deadline"
    if memory.is_oom(err, cpu_capped=cpu_capped):
        return "oom", f"out of memory: {first_line(err)[:200]}"
    return "error", f"{type(err).__name__}: {first_line(err)[:300]}"


def train(
    cfg: TrainConfig,
    *,
    workload: Any = None,
    report: Report | None = None,
    log: Callable[[str], None] | None = progress.log,
    timing_gate: AbstractContextManager | None = None,
    step_hook: Callable[[], None] | None = None,
) -> RunResult:
    """Train `cfg` to its token budget (or max_steps); return what it measured (never raises for oom/nan).

    `report` gets interim metrics at each log point; `timing_gate` is held around the steady (timed) steps,
    so runs sharing a GPU can warm up together but are timed one at a time; `step_hook` is called after
    every optimizer step (a profiler's step)."""
    log = log or (lambda msg: None)
    use_compile_cache(cfg)
    device = resolve_device(cfg)
    started = time.time()
    workload = as_job(workload or load_workload(cfg), cfg)
    cfg = workload.fit(cfg)  # counting its units per example (the checks before a run did it already)
    log(f"workload: {workload.describe()}")
    deadline_s = cfg.compile_deadline_s
    if cfg.kernels == "fused":
        shipped = tuning.install_for_this_gpu()
        log(f"autotune: {shipped or 'no shipped results for this GPU: tuned here, once per cache dir'}")
        deadline_s = first_step_deadline(deadline_s, autotunes=shipped is None)
    _prepare(cfg, workload, device)
    state: dict[str, Any] = {}  # the run's model, optimizer and data: dropped before memory is measured
    cache = CacheCount()
    status, error = "ok", None
    state["training"] = _Training(cfg, workload, device, log, _placed(device, workload.unit))
    try:
        with memory.MemoryCap(cfg, device):
            state["training"].run(report, timing_gate, step_hook, deadline_s)
    except NonFiniteLoss as err:
        status, error = "nan", str(err)
    except Exception as err:  # noqa: BLE001 - every failure becomes a status the tuner can learn from
        capped = device.type == "cpu" and cfg.memory_cap_mb is not None
        status, error = _failure(err, capped, deadline_s)
    finally:
        result = state.pop("training").measured()  # what it measured until it ended
        peak_mem_mb = memory.release(device)
    result = replace(
        result,
        status=status,
        error=error,
        peak_mem_mb=peak_mem_mb,
        compile_threads=_compile_threads(),  # read at the end: Inductor loads at the first compile
        compile_cache_use=cache.outcome(),
        wall_s=round(time.time() - started, 3),
        mfu=flops.mfu(result.tokens_per_s, result.flops_per_token, result.peak_flops),
    )
    if result.status != "ok":
        log(f"run ended: {result.status}: {result.error}")
    elif result.mfu is not None:
        log(result.mfu_line(cfg.precision))
    if cfg.out_dir:
        (Path(cfg.out_dir) / "result.json").write_text(json.dumps(result.as_json(), indent=1))
    return result


def _progress_line(cfg: TrainConfig, point: dict[str, Any], rate: float, unit: str = "tokens") -> str:
    done = point["step"]
    eta = (cfg.total_steps - done) * cfg.tokens_per_step / rate
    more = "".join(f" | {name} {value:.4f}" for name, value in point.get("val_metrics", {}).items())
    return (
        f"step {done}/{cfg.total_steps} | {unit} {point['tokens']:,} | loss {point['train_loss']:.4f}"
        + (f" | val {point['val_loss']:.4f}" if "val_loss" in point else "")
        + f"{more} | {rate:,.0f} {progress.per_second(unit)} | ETA {progress.fmt_seconds(eta)}"
    )


class _Training:
    """One run's model, optimizer and data, built and stepped to the token budget by `run`; `result` is
    what it has measured so far, also when it fails (its setup too is part of `run`). The steps done and
    the timer's figures are kept apart and put into it by `measured()`: a replace per step costs ~10 us."""

    def __init__(self, cfg: TrainConfig, workload: Job, device: torch.device, log, result: RunResult):
        self.cfg, self.workload, self.device, self.log, self.result = cfg, workload, device, log, result
        self.history: list[dict[str, Any]] = []
        self.done = 0
        self.timing: dict[str, Any] = {}

    def measured(self) -> RunResult:
        tokens = self.done * self.cfg.tokens_per_step
        return replace(self.result, steps=self.done, tokens=tokens, **self.timing)

    def _setup(self) -> None:
        cfg, workload, device, log = self.cfg, self.workload, self.device, self.log
        self.model = workload.build_model().to(device)
        counted = flops.counted(workload.flops_per_token(self.model), device, cfg.precision, log)
        self.result = replace(self.result, params=sum(p.numel() for p in self.model.parameters()), **counted)
        summary = getattr(self.model, "summary", None)
        log(summary() if callable(summary) else f"model: {self.result.params:,} parameters")
        self.steps = OptimizerStep(cfg, workload, self.model, device)
        self.val = workload.val_batches(device)
        self.batches = workload.train_batches(device)
        self.timer = StepTimer.for_device(device, cfg.timing_warmup_steps, cfg.tokens_per_step)
        self.window = ExitStack()  # holds the timing gate, if any, from the first steady step to the last
        self.last_log = time.monotonic()
        log(
            f"training {cfg.total_steps} steps x {cfg.tokens_per_step} {workload.unit} on {device} "
            f"({cfg.precision}, compile={cfg.compile}, kernels={cfg.kernels}, loader={cfg.loader})"
        )
        on_cuda = device.type == "cuda"
        note = fp32_fused_note(cfg.precision, cfg.kernels, on_cuda, os.environ.get("TRITON_F32_DEFAULT"))
        if note:
            log(note)

    def run(
        self, report: Report | None, gate: AbstractContextManager | None, step_hook, deadline_s: float | None
    ) -> None:
        self._setup()
        cfg = self.cfg
        self.timer.start()
        self.model.train()
        with self.window:
            for step in range(cfg.total_steps):
                if step == 1 and gate is not None:  # after the step that compiles
                    self._take_gate(gate)
                lr = lr_at(cfg, step)
                self.steps.set_lr(lr)
                with self.timer.step(), FirstStepDeadline(deadline_s if step == 0 else None):
                    self.steps.step(self.batches)
                if step_hook is not None:
                    step_hook()
                done = step + 1
                self.done, self.timing = done, self.timer.window()
                is_eval = done == cfg.total_steps or (cfg.eval_interval and done % cfg.eval_interval == 0)
                overdue = time.monotonic() - self.last_log >= cfg.progress_s  # a line every progress_s
                if done % cfg.log_interval == 0 or is_eval or overdue:
                    self._log_point(done, lr, bool(is_eval), report)
            self.timing = self.timer.summary()
            if cfg.out_dir and cfg.save_model:
                torch.save(self.model.state_dict(), Path(cfg.out_dir) / "model.pt")
            if cfg.profile_steps:  # after the window's figures and the saved weights; the gate still held
                timed_ms = self.timing.get("step_ms_median")
                one_step = partial(self.steps.step, self.batches)
                found = profile.after_window(one_step, cfg.profile_steps, self.device, timed_ms, self.log)
                self.result = replace(self.result, profile=found)

    def _take_gate(self, gate: AbstractContextManager) -> None:
        """Waits while another run on this GPU holds it; the wait counts neither as warm-up nor as steady."""
        started = time.perf_counter()
        self.window.enter_context(gate)
        if self.cfg.timing_warmup_steps == 1:
            self.timer.begin_window()  # the warm-up is over: the steady window starts now
        else:
            self.timer.exclude_from_warmup(time.perf_counter() - started)

    def _train_loss(self, done: int, lr: float) -> float:
        """The mean loss since the last log point; its .item() is the one host-device sync of a log point."""
        loss = self.steps.mean_loss()
        if not math.isfinite(loss):
            raise NonFiniteLoss(f"train loss is {loss} at step {done} (lr {lr:.2e}, {self.cfg.precision})")
        return loss

    def _log_point(self, done: int, lr: float, is_eval: bool, report: Report | None) -> None:
        """The loss and speed so far, an eval when due, a progress line and an interim report."""
        now = self.timer.close_segment()
        self.last_log = time.monotonic()
        if done == self.cfg.total_steps and not self.cfg.profile_steps:
            self.window.close()  # the GPU's queue is drained (close_segment syncs): the next run may time
        train_loss = self._train_loss(done, lr)
        self.result = replace(self.result, train_loss=round(train_loss, 5))
        self.timing = self.timer.window()
        point: dict[str, Any] = {
            "step": done,
            "tokens": done * self.cfg.tokens_per_step,
            "train_loss": train_loss,
        }
        if is_eval:
            val_loss, found = eval_figures(self.model, self.workload, self.val)
            if not math.isfinite(val_loss):
                raise NonFiniteLoss(f"val loss is {val_loss} at step {done}")
            point["val_loss"] = round(val_loss, 5)
            metrics = {name: round(value, 5) for name, value in found.items()} or None
            if metrics:
                point["val_metrics"] = metrics
            self.history.append(point)
            self.result = replace(
                self.result, val_loss=point["val_loss"], val_metrics=metrics, history=tuple(self.history)
            )
        self.log(_progress_line(self.cfg, point, self.timer.rate(now), self.result.unit))
        if report:
            # The steady window so far travels with each interim report: a trial the search stops
            # early still gets its GPU figures for the part it ran.
            report({**point, **self.measured().interim(), "done": done == self.cfg.total_steps})
        # Neither an eval nor the report is training time: Ray Tune's report waits for the driver (~5 ms
        # idle, more under a busy search), which a short speed window of a fast config would pay ~5%.
        self.timer.resume()
