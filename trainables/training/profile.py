"""Where a run's step time goes: a few steps under torch.profiler after its timed window, summed up as a
`Profile` (compute, memory or launch bound, the device's busy share of a step, the top ops).

The loop calls `after_window` once the timed window is over and its figures are read (`profile_steps` > 0,
trainables/config.py), so the speed figure never includes a profiled step. What is counted: on a GPU the
device's own events (kernels, copies, memsets; the union of their intervals is the time it was busy), on
a CPU the ops' self CPU time. `busy` is that time per step over a step: on a GPU the run's timed median
step (kernels run as fast under the profiler, but the host slows, so the profiled wall would read a
launch-bound run as idler than it is), on a CPU (and a GPU run too short to have a timed window) the
profiled steps' own wall, as the ops' times there are the profiled ones.

The rules (`classify`), first match wins:
  1. launch: the device was busy under LAUNCH_BUSY_BELOW of a step: it waited for the host (Python, kernel
     launches, data). More work per launch (compile, CUDA graphs, a larger batch) is the remedy.
  2. compute: matmul/attention-like ops (`COMPUTE_OPS`: GEMMs, convolutions, attention, Inductor's matmul
     templates, the chunked RWKV6/SSD kernels, whose work is blocked dots; not `MEMORY_OPS`, the depthwise
     causal conv1d and cumulative sums, which read as much as they compute) take at least
     COMPUTE_SHARE_AT_LEAST of the device's time.
  3. memory: the rest (elementwise, copies, norms, reductions, scans) dominate: bandwidth limits them.
Where the device's time cannot be seen, the host's decides: kernels replayed from CUDA graphs are, in some
torch versions, not shown by the profiler (each replay is one cudaGraphLaunch on the host, and fewer kernels
are seen than graphs launched: `kernels_hidden`); the top ops are then the host's. Then the host
busy under LAUNCH_BUSY_BELOW of a step (CUDA runtime calls left out: a launch blocks while the device's
queue is full) means the device is the limit, `device`-bound with its kernel mix unknown; else launch.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from trainables.common.errors import first_line

Bound = Literal["compute", "memory", "launch", "device"]
OpKind = Literal["compute", "memory"]

LAUNCH_BUSY_BELOW = 0.5
COMPUTE_SHARE_AT_LEAST = 0.5
TOP_OPS = 5
COMPUTE_OPS = re.compile(
    r"gemm|matmul|(^|[^a-z])(mm|bmm|addmm|baddbmm)([^a-z]|$)|conv|attention|attn|flash|sdpa|cutlass|cublas"
    r"|xmma|triton_tem|chunk",
    re.IGNORECASE,
)
MEMORY_OPS = re.compile(
    r"causal_conv1d|depthwise|cumsum", re.IGNORECASE
)  # named like compute, bound by bytes
# host events that wrap ops rather than run them (their self time is overhead, not op work); not Inductor's
# "## Call CompiledFxGraph <hash> ##", whose self time on a CPU is its compiled kernels' (they record none)
HOST_WRAPPERS = re.compile(
    r"^(ProfilerStep|Optimizer\.|autograd::|torch::autograd::|enumerate\(DataLoader\))|Backward\d*$"
)  # the profiler's steps, the optimizer's and DataLoader's Python, autograd's nodes around their aten ops
COMPILED_GRAPH = "## Call CompiledFxGraph"
CUDA_RUNTIME = re.compile(r"^cu[a-zA-Z]+")  # cudaLaunchKernel, cudaGraphLaunch, cuLaunchKernel, ...


@dataclass(frozen=True)
class OpTime:
    """One op over the profiled steps: a kernel (or copy) on a GPU, an op on a CPU; its self time, in us."""

    name: str
    self_us: float


@dataclass(frozen=True)
class TopOp:
    """One of the ops that took the most time: its share of all the ops' time and its class by name."""

    name: str
    share: float
    kind: OpKind


@dataclass(frozen=True, kw_only=True)
class Profile:
    """The profiled steps of a run, summed up (trainables/training/profile.py says the rules)."""

    bound: Bound
    reason: str  # the rule that decided, in one line
    steps: int  # steps profiled, after the timed window
    step_ms: float  # the step time busy is measured against
    busy: float | None  # the device's busy share of a step (0..1); None: its kernels were not visible
    compute_share: float | None  # matmul/attention-like ops' share of the ops' time
    top_ops: tuple[TopOp, ...] = ()
    measured_on: Literal["cuda", "cpu"] = "cpu"

    def line(self, beside: str = "") -> str:
        """'launch-bound (device busy 31% of a step){beside}; top ops: a 40%, b 20%' (a CPU's: 'ops busy';
        kernels not visible: the reason instead of the busy share)."""
        who = "device" if self.measured_on == "cuda" else "ops"
        busy = f"{who} busy {self.busy:.0%} of a step" if self.busy is not None else self.reason
        ops = ", ".join(f"{op.name} {op.share:.0%}" for op in self.top_ops)
        return f"{self.bound}-bound ({busy}){beside}" + (f"; top ops: {ops}" if ops else "")


def op_kind(name: str) -> OpKind:
    return "compute" if COMPUTE_OPS.search(name) and not MEMORY_OPS.search(name) else "memory"


def short_name(name: str) -> str:
    """A kernel's name without its C++ clothes: 'void at::native::foo_kernel<4, ...>(int, ...)' -> 'foo_kernel'."""
    if name.startswith(COMPILED_GRAPH):
        return "CompiledFxGraph (Inductor's kernels)"
    # "(anonymous namespace)::" split at its "(" leaves "at::native::" and an empty name in a report
    name = name.removeprefix("void ").replace("(anonymous namespace)::", "")
    bare = re.split(r"[<(]", name, maxsplit=1)[0].strip() or name
    return (bare.rsplit("::", 1)[-1] if not bare.startswith("aten::") else bare) or bare


def top_ops(ops: Iterable[OpTime], n: int = TOP_OPS) -> tuple[TopOp, ...]:
    """The `n` ops with the most self time (same short names merged), each with its share of all of it."""
    totals: dict[str, float] = {}
    for op in ops:
        key = short_name(op.name)
        totals[key] = totals.get(key, 0.0) + op.self_us
    whole = sum(totals.values())
    if whole <= 0:
        return ()
    ranked = sorted(totals.items(), key=lambda item: -item[1])[:n]
    return tuple(TopOp(name, round(us / whole, 4), op_kind(name)) for name, us in ranked)


def compute_share(ops: Sequence[OpTime]) -> float | None:
    whole = sum(op.self_us for op in ops)
    return sum(op.self_us for op in ops if op_kind(op.name) == "compute") / whole if whole > 0 else None


def classify(ops: Sequence[OpTime], busy: float | None, host_busy: float | None = None) -> tuple[Bound, str]:
    """The bound and its one-line reason (the rules in this module's docstring). `ops`: the device's
    (a GPU's kernels, or a CPU's ops); `busy`: its busy share of a step, None where its kernels were not
    visible; `host_busy`: the host's share then (CUDA runtime calls left out)."""
    if busy is None:
        host = host_busy or 0.0
        if host < LAUNCH_BUSY_BELOW:
            return "device", (
                f"kernels replayed from CUDA graphs are not visible to this profiler; the host was busy "
                f"{host:.0%} of a step, so the device is the limit (its kernel mix unknown)"
            )
        return "launch", f"kernels not visible (CUDA graphs); the host was busy {host:.0%} of a step"
    if busy < LAUNCH_BUSY_BELOW:
        return "launch", f"the device was busy {busy:.0%} of a step: it waits for the host (Python, launches)"
    share = compute_share(ops) or 0.0
    if share >= COMPUTE_SHARE_AT_LEAST:
        return (
            "compute",
            f"compute ops (matmuls, convolutions, attention) take {share:.0%} of the device's time",
        )
    return "memory", f"elementwise, copy, norm and reduction ops take {1 - share:.0%} of the device's time"


def summarize(
    ops: Sequence[OpTime],
    *,
    steps: int,
    step_ms: float,
    busy_us: float | None,
    host_us: float | None = None,
    measured_on: Literal["cuda", "cpu"] = "cpu",
) -> Profile:
    """The Profile of `steps` steps whose device was busy `busy_us` in all (None: not visible) and whose
    host ran ops for `host_us`, against a step of `step_ms`."""
    span_us = max(steps * step_ms * 1e3, 1e-9)
    busy = None if busy_us is None else min(1.0, busy_us / span_us)
    host = None if host_us is None else min(1.0, host_us / span_us)
    bound, reason = classify(ops, busy, host)
    share = compute_share(ops)
    return Profile(
        bound=bound,
        reason=reason,
        steps=steps,
        step_ms=round(step_ms, 3),
        busy=None if busy is None else round(busy, 4),
        compute_share=None if share is None else round(share, 4),
        top_ops=top_ops(ops),
        measured_on=measured_on,
    )


# --- reading torch.profiler's events ------------------------------------------------------------------


def union_us(intervals: Iterable[tuple[float, float]]) -> float:
    """The time covered by (start, end) intervals, overlaps counted once (kernels on several streams)."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def _is_host_op(event: Any) -> bool:
    return not event.is_async and not HOST_WRAPPERS.search(event.name)


def kernels_hidden(host_names: Sequence[str], device_names: Sequence[str]) -> bool:
    """Whether CUDA graph replays hid their kernels: fewer kernels seen than graphs launched (each replay
    runs many), copies and memsets (a batch's, outside the graph) not counted as kernels."""
    launches = sum(1 for name in host_names if name.startswith("cudaGraphLaunch"))
    kernels = sum(1 for name in device_names if not name.startswith(("Memcpy", "Memset")))
    return launches > 0 and kernels < launches


def read_events(events: Sequence[Any], on_cuda: bool) -> tuple[list[OpTime], float | None, float]:
    """(the device's ops, its busy time, the host's op time without CUDA runtime calls) from torch.profiler's
    FunctionEvents; where CUDA graphs hid the kernels, the host's ops (a replay is one cudaGraphLaunch; waits
    in a synchronize left out) and None for the busy time."""
    from torch.autograd import DeviceType

    host = [e for e in events if e.device_type == DeviceType.CPU and _is_host_op(e)]
    host_us = sum(e.self_cpu_time_total for e in host if not CUDA_RUNTIME.match(e.name))
    host_ops = [OpTime(e.name, e.self_cpu_time_total) for e in host if "Synchronize" not in e.name]
    if not on_cuda:
        return host_ops, host_us, host_us
    device = [e for e in events if e.device_type == DeviceType.CUDA]
    if kernels_hidden([e.name for e in host], [e.name for e in device]):
        return host_ops, None, host_us
    ops = [OpTime(e.name, e.time_range.elapsed_us()) for e in device]
    return ops, union_us((e.time_range.start, e.time_range.end) for e in device), host_us


def after_window(
    step: Callable[[], None], steps: int, device: Any, timed_step_ms: float | None, log: Callable[[str], None]
) -> Profile | None:
    """`steps` more calls of `step` under torch.profiler (CPU, and CUDA where the run is on a GPU), summed
    up; None, with a line in the log, where the profiler fails (the run's figures stand without it)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    on_cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    sync = torch.cuda.synchronize if on_cuda else (lambda: None)
    try:
        sync()
        with profile(activities=activities) as prof:
            started = time.perf_counter()
            for _ in range(steps):
                step()
            sync()
            wall_ms = (time.perf_counter() - started) * 1e3 / steps
        ops, busy_us, host_us = read_events(prof.events(), on_cuda)
    except Exception as err:  # noqa: BLE001 - a profile is extra: the run's own figures stand without it
        log(f"profile: not taken: {type(err).__name__}: {first_line(err)[:200]}")
        return None
    found = summarize(
        ops,
        steps=steps,
        step_ms=(timed_step_ms if on_cuda else None) or wall_ms,
        busy_us=busy_us,
        host_us=host_us,
        measured_on="cuda" if on_cuda else "cpu",
    )
    log(f"profile ({steps} steps after the timed window): {found.line()}")
    return found
