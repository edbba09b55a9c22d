"""The one training loop. It knows nothing of Ray: the Ray trainable and the CLI both call `train()`.

Speed is measured the way the tuner needs it: steady-state tokens/s over the steps after
`timing_warmup_steps` (compilation, autotuning and CUDA-graph capture happen in those first steps and are
reported apart as `compile_s` / `warmup_s`), step-time median and p90 from CUDA events on GPU (wall clock
on CPU), and the wall-clock window (time.time) of the steady phase so GPU telemetry can be joined to it.
Host-device syncs happen only at log/eval boundaries so the measurement does not slow what it measures.
"""

from __future__ import annotations

import gc
import math
import os
import platform
import resource
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch

from trainables import cpu_load
from trainables.config import ConfigError, TrainConfig, dump_config
from trainables.workload import Workload, load_workload

Report = Callable[[dict[str, Any]], None]

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


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
        from model.ops import available_backends

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


def _param_groups(model: torch.nn.Module, workload: Workload, cfg: TrainConfig) -> list[dict[str, Any]]:
    """Weight decay on matrices only; per-parameter lr multipliers (e.g. Mamba 2x) as separate groups."""
    no_decay = set(getattr(model, "no_weight_decay", lambda: set())())
    groups: dict[tuple[float, bool], list[torch.nn.Parameter]] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        decay = p.ndim >= 2 and name not in no_decay
        groups.setdefault((workload.lr_multiplier(name), decay), []).append(p)
    return [
        {"params": ps, "lr_mult": mult, "weight_decay": cfg.weight_decay if decay else 0.0}
        for (mult, decay), ps in sorted(groups.items())
    ]


def lr_at(cfg: TrainConfig, step: int) -> float:
    """Linear warm-up, then cosine down to min_lr over the whole token budget (the seed schedule)."""
    peak, total = cfg.peak_lr(), cfg.schedule_steps
    warm = int(cfg.warmup_frac * total)
    if step < warm:
        return peak * (step + 1) / warm
    progress = min(1.0, (step - warm) / max(1, total - warm))
    floor = min(cfg.min_lr, peak)
    return floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * progress))


# What a trial reports of where and when it was timed, in every report: the search joins GPU telemetry
# on them, also for trials stopped before their final one.
WINDOW_KEYS = ("window_t0", "window_t1", "window_tokens", "node", "pid")


def first_line(err: BaseException) -> str:
    """The first line of an error's message (some, like a bare MemoryError, have none)."""
    lines = str(err).splitlines()
    return lines[0] if lines else type(err).__name__


def _is_oom(err: BaseException, cpu_capped: bool = False) -> bool:
    if isinstance(err, torch.OutOfMemoryError | MemoryError):
        return True
    text = str(err)
    if cpu_capped and "could not create a primitive" in text:
        return True  # oneDNN's allocation failing under the CPU address-space cap
    return isinstance(err, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def _peak_mem_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # process peak RSS (KiB on Linux)


class _MemoryCap:
    """`memory_cap_mb`: a hard cap that turns over-use into an OOM (CUDA: allocator fraction; CPU: rlimit)."""

    def __init__(self, cfg: TrainConfig, device: torch.device):
        self.cfg, self.device, self.saved = cfg, device, None

    def __enter__(self):
        cap, frac = self.cfg.memory_cap_mb, self.cfg.gpu_memory_fraction
        if self.device.type == "cuda":
            total = torch.cuda.get_device_properties(self.device).total_memory
            fractions = [f for f in (frac, cap and cap * 2**20 / total) if f]
            if fractions:
                torch.cuda.set_per_process_memory_fraction(min(1.0, min(fractions)), self.device)
        elif cap:
            # Address-space limit above what the process already maps, so only new allocations count.
            with open("/proc/self/status") as f:
                vm_kb = next(int(line.split()[1]) for line in f if line.startswith("VmSize:"))
            self.saved = resource.getrlimit(resource.RLIMIT_AS)
            resource.setrlimit(resource.RLIMIT_AS, (vm_kb * 1024 + cap * 2**20, self.saved[1]))
        return self

    def __exit__(self, *exc):
        if self.saved is not None:
            resource.setrlimit(resource.RLIMIT_AS, self.saved)
        elif self.device.type == "cuda" and (self.cfg.memory_cap_mb or self.cfg.gpu_memory_fraction):
            torch.cuda.set_per_process_memory_fraction(1.0, self.device)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _fmt_eta(seconds: float) -> str:
    seconds = int(max(0, seconds))
    return (
        f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
        if seconds >= 3600
        else f"{seconds // 60}m{seconds % 60:02d}s"
    )


@torch.no_grad()
def evaluate(model: torch.nn.Module, workload: Workload, batches) -> float:
    """Mean val loss over the fixed val windows, in fp32 and eager mode so it reflects the weights only."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for batch in batches:
        n = batch[0].numel()
        total += workload.loss(model, batch).float().item() * n
        count += n
    model.train(was_training)
    return total / max(count, 1)


def fp32_fused_note(precision: str, kernels: str, on_cuda: bool, triton_f32: str | None) -> str | None:
    """The one-line caveat for fp32 runs through fused Triton kernels, whose fp32 dots default to TF32."""
    if precision != "fp32" or kernels == "torch" or not on_cuda or triton_f32 == "ieee":
        return None
    if kernels == "auto":
        from model.ops import available_backends

        if not any(ok is True for name, ok in available_backends().items() if name not in ("naive", "torch")):
            return None  # auto falls back to the torch ops: no Triton kernels run
    return (
        "note: fused Triton kernels round fp32 matmul inputs to TF32 (SSD gradients ~1.5e-3 from exact "
        "fp32); set TRITON_F32_DEFAULT=ieee before the first compile for exact fp32 (docs/benchmarks.md)"
    )


def train(
    cfg: TrainConfig,
    *,
    workload: Workload | None = None,
    report: Report | None = None,
    log: Callable[[str], None] | None = _log,
) -> dict[str, Any]:
    """Train `cfg` to its token budget (or max_steps); return the metrics dict (never raises for oom/nan)."""
    log = log or (lambda msg: None)
    device = resolve_device(cfg)
    started = time.time()
    workload = workload or load_workload(cfg)
    result: dict[str, Any] = {
        "status": "ok",
        "error": None,
        "device": str(device),
        "gpu": device.index if device.type == "cuda" else None,
        "node": platform.node(),
        "pid": os.getpid(),
        "tokens_per_s": None,
        "val_loss": None,
        "train_loss": None,
        "peak_mem_mb": None,
        "steps": 0,
        "tokens": 0,
        "compile_s": None,
        "warmup_s": None,
        "step_ms_median": None,
        "step_ms_p90": None,
        "window_t0": None,
        "window_t1": None,
        "window_tokens": 0,
        "cpu_own_cores": None,  # over the timed window: CPU cores this run kept busy, and other processes
        "cpu_others_cores": None,
        "cpu_count": os.cpu_count(),
        "params": None,
        "history": [],
    }
    log(f"workload: {workload.describe()}")
    if cfg.out_dir:
        Path(cfg.out_dir).mkdir(parents=True, exist_ok=True)
        dump_config(cfg, Path(cfg.out_dir) / "config.yaml")
        workload.save(cfg.out_dir)
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.cuda.reset_peak_memory_stats(device)
    # fp32 means fp32: TF32 tensor cores only when asked for.
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = cfg.precision == "tf32"
    torch.manual_seed(cfg.seed)

    state: dict[str, Any] = {}
    try:
        with _MemoryCap(cfg, device):
            _run(cfg, workload, device, report, log, result, state)
    except NonFiniteLoss as err:
        result["status"], result["error"] = "nan", str(err)
    except Exception as err:  # noqa: BLE001 - every failure becomes a status the tuner can learn from
        if _is_oom(err, cpu_capped=device.type == "cpu" and cfg.memory_cap_mb is not None):
            result["status"], result["error"] = "oom", f"out of memory: {first_line(err)[:200]}"
        else:
            result["status"], result["error"] = (
                "error",
                f"{type(err).__name__}: {first_line(err)[:300]}",
            )
    finally:
        state.clear()
        gc.collect()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            result["peak_mem_mb"] = round(_peak_mem_mb(device), 1)
            torch.cuda.empty_cache()
        else:
            result["peak_mem_mb"] = round(_peak_mem_mb(device), 1)
    result["wall_s"] = round(time.time() - started, 3)
    if result["status"] != "ok":
        log(f"run ended: {result['status']}: {result['error']}")
    if cfg.out_dir:
        import json

        (Path(cfg.out_dir) / "result.json").write_text(json.dumps(result, indent=1))
    return result


def _run(cfg, workload, device, report, log, result, state) -> None:
    model = workload.build_model().to(device)
    state["model"] = model
    result["params"] = sum(p.numel() for p in model.parameters())
    summary = getattr(model, "summary", None)
    log(summary() if callable(summary) else f"model: {result['params']:,} parameters")

    optimizer = torch.optim.AdamW(
        _param_groups(model, workload, cfg),
        lr=cfg.peak_lr(),
        betas=(cfg.beta1, cfg.beta2),
        fused=True if cfg.fused_adamw else None,
    )
    state["optimizer"] = optimizer
    step_model = model
    if cfg.compile != "none":
        # A fresh, static-shape compile per run: Ray reuses worker processes across trials, and guards
        # left by an earlier trial's model would otherwise turn shapes dynamic (slower, and fragile).
        torch._dynamo.reset()
        mode = None if cfg.compile == "default" else cfg.compile
        step_model = torch.compile(model, mode=mode, dynamic=False)
    state["step_model"] = step_model
    amp_dtype = AMP_DTYPES.get(cfg.precision)
    autocast = (lambda: torch.autocast(device.type, dtype=amp_dtype)) if amp_dtype else nullcontext
    scaler = torch.amp.GradScaler(device.type, enabled=cfg.precision == "fp16")

    val = workload.val_batches(device)
    batches = workload.train_batches(device)
    state["batches"] = batches
    total_steps, tokens_per_step = cfg.total_steps, cfg.tokens_per_step
    on_cuda = device.type == "cuda"
    log(
        f"training {total_steps} steps x {tokens_per_step} tokens on {device} "
        f"({cfg.precision}, compile={cfg.compile}, kernels={cfg.kernels}, loader={cfg.loader})"
    )
    note = fp32_fused_note(cfg.precision, cfg.kernels, on_cuda, os.environ.get("TRITON_F32_DEFAULT"))
    if note:
        log(note)

    def sync() -> float:
        if on_cuda:
            torch.cuda.synchronize(device)
        return time.perf_counter()

    step_times: list[float] = []  # seconds, steady steps only
    events: list[tuple[Any, Any]] = []
    loss_sum = torch.zeros((), device=device)
    loss_count = 0
    steady_s, steady_tokens = 0.0, 0
    segment_start = sync()
    run_start = segment_start
    cpu_at = {"start": cpu_load.snapshot(), "window_t0": None, "window_t1": None}

    def close_segment(now: float, step: int) -> None:
        nonlocal steady_s, steady_tokens, segment_start
        if step > cfg.timing_warmup_steps:
            steady_s += now - segment_start
        segment_start = now
        if on_cuda:
            step_times.extend(a.elapsed_time(b) / 1000 for a, b in events)
            events.clear()

    model.train()
    for step in range(total_steps):
        lr = lr_at(cfg, step)
        for group in optimizer.param_groups:
            group["lr"] = lr * group["lr_mult"]
        steady = step >= cfg.timing_warmup_steps
        if on_cuda and steady:
            ev = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            ev[0].record()
        t0 = time.perf_counter()
        for _ in range(cfg.grad_accum):
            batch = next(batches)
            with autocast():
                loss = workload.loss(step_model, batch)
            scaler.scale(loss / cfg.grad_accum).backward()
            loss_sum += loss.detach().float()
            loss_count += 1
        if cfg.grad_clip > 0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        if steady:
            if on_cuda:
                ev[1].record()
                events.append(ev)
            else:
                step_times.append(time.perf_counter() - t0)
            steady_tokens += tokens_per_step
        done = step + 1
        result["steps"], result["tokens"] = done, done * tokens_per_step

        if done == cfg.timing_warmup_steps:
            now = sync()
            close_segment(now, done)
            result["warmup_s"] = round(now - run_start, 3)
            result["window_t0"] = time.time()
            cpu_at["window_t0"] = cpu_load.snapshot()
        is_eval = done == total_steps or (cfg.eval_interval and done % cfg.eval_interval == 0)
        if done % cfg.log_interval == 0 or is_eval:
            now = sync()
            close_segment(now, done)
            train_loss = (loss_sum / max(loss_count, 1)).item()
            loss_sum.zero_()
            loss_count = 0
            if not math.isfinite(train_loss):
                raise NonFiniteLoss(
                    f"train loss is {train_loss} at step {done} (lr {lr:.2e}, {cfg.precision})"
                )
            result["train_loss"] = round(train_loss, 5)
            if steady_s > 0:
                result["tokens_per_s"] = round(steady_tokens / steady_s, 1)
                result["window_t1"], result["window_tokens"] = time.time(), steady_tokens
                cpu_at["window_t1"] = cpu_load.snapshot()
            point: dict[str, Any] = {"step": done, "tokens": done * tokens_per_step, "train_loss": train_loss}
            if is_eval:
                val_loss = evaluate(model, workload, val)
                if not math.isfinite(val_loss):
                    raise NonFiniteLoss(f"val loss is {val_loss} at step {done}")
                result["val_loss"] = point["val_loss"] = round(val_loss, 5)
                result["history"].append(point)
                segment_start = sync()  # eval time is not training time
            rate = result["tokens_per_s"] or done * tokens_per_step / max(now - run_start, 1e-9)
            eta = (total_steps - done) * tokens_per_step / rate
            log(
                f"step {done}/{total_steps} | tokens {done * tokens_per_step:,} | loss {train_loss:.4f}"
                + (f" | val {point['val_loss']:.4f}" if is_eval else "")
                + f" | {rate:,.0f} tok/s | ETA {_fmt_eta(eta)}"
            )
            if report:
                # The steady window so far travels with each interim report: a trial the search stops
                # early still gets its GPU figures for the part it ran.
                window = {k: result[k] for k in WINDOW_KEYS}
                report(
                    {**point, **window, "tokens_per_s": result["tokens_per_s"], "done": done == total_steps}
                )

    if step_times:
        ms = sorted(t * 1000 for t in step_times)
        result["step_ms_median"] = round(statistics.median(ms), 3)
        result["step_ms_p90"] = round(ms[min(len(ms) - 1, int(0.9 * len(ms)))], 3)
        if result["warmup_s"] is not None:
            # The warm-up steps' excess over steady steps is the one-off cost (compile, autotune, graphs).
            excess = result["warmup_s"] - cfg.timing_warmup_steps * result["step_ms_median"] / 1000
            result["compile_s"] = round(max(0.0, excess), 3)
    if result["tokens_per_s"] is None:
        # Too short to have a steady phase: the overall rate, flagged by compile_s = None, and the whole
        # run as the telemetry window (warm-up included) so its GPU figures still exist.
        end = sync()
        result["tokens_per_s"] = round(result["tokens"] / max(end - run_start, 1e-9), 1)
        result["window_t0"], result["window_t1"] = time.time() - (end - run_start), time.time()
        result["window_tokens"] = result["tokens"]
        cpu_at["window_t0"], cpu_at["window_t1"] = cpu_at["start"], cpu_load.snapshot()
    result.update(cpu_load.window_load(cpu_at["window_t0"], cpu_at["window_t1"]))
    if cfg.out_dir and cfg.save_model:
        torch.save(model.state_dict(), Path(cfg.out_dir) / "model.pt")
