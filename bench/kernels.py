"""Fused kernels vs the chunked torch ops: accuracy (forward and every input's gradient) and speed.

    python bench/kernels.py [--out FILE]    # CUDA, with fla, mamba_ssm and causal_conv1d installed
    python bench/kernels.py --cpu           # smoke test here: torch backend vs naive recurrence

GPU mode compares the fused backend (fla / mamba_ssm) with the torch backend at the seed shapes (B=8,
T=256) and at B=64, in fp32 and bf16. "bf16" is what model.hybrid passes under autocast: activations
(r, k, v / x, B, C / conv input) in bf16, log-decays and parameters (w, u / dt, A, D / conv weight, bias)
in fp32. Errors are against the reference backend (torch; --cpu: naive) run in float64 on the same
rounded inputs: rel error = ||a - b|| / ||b|| in float64, the gradient column is the worst over all
inputs. Both backends are timed on the fp32 / bf16 inputs: CUDA-event medians after warm-up.
Prints a markdown table and exits 1 if any check fails (2 if it cannot run at all).

fp32 and TF32: Triton rounds fp32 ``tl.dot`` inputs to TF32 unless TRITON_F32_DEFAULT=ieee. mamba_ssm's
SSD then differs from the exact result by ~1.5e-3 (above the 1e-3 fp32 limit), and by ~6e-7 with ieee
(measured on an H200). So prove fp32 accuracy with TRITON_F32_DEFAULT=ieee, and take timings without it
(the mode training runs in); the versions line says which mode ran.

First calls compile Triton kernels (minutes when cold, fla's autotuned ones longest): set
TRITON_CACHE_DIR to a folder that stays warm between runs.
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import os
import statistics
import sys
import time
import traceback

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from anywhere
from model import ops  # noqa: E402

T = 256
TOLERANCE = {torch.float32: 1e-3, torch.bfloat16: 2e-2}
FUSED = {"rwkv6": "fla", "ssd": "mamba_ssm", "causal_conv1d": "mamba_ssm"}
CALLS = {
    "rwkv6": lambda backend, *a: ops.rwkv6(*a, backend=backend),
    "ssd": lambda backend, *a: ops.ssd(*a, backend=backend, chunk_size=64),
    "causal_conv1d": lambda backend, *a: ops.causal_conv1d(*a, activation="silu", backend=backend),
}


def make_inputs(op: str, batch: int, dtype: torch.dtype, device: str, seed: int = 0) -> list[torch.Tensor]:
    """Seed-model shapes and value ranges; activations in ``dtype``, decays and parameters in fp32."""
    g = torch.Generator().manual_seed(seed)

    def act(*shape, scale=1.0):
        return (scale * torch.randn(*shape, generator=g)).to(device, dtype)

    def param(*shape, scale=1.0):
        return (scale * torch.randn(*shape, generator=g)).to(device)

    if op == "rwkv6":  # H=4, K=V=32; log-decay w = logsigmoid(.) as in fla's tests
        H, K = 4, 32
        r, k, v = act(batch, T, H, K), act(batch, T, H, K, scale=K**-0.5), act(batch, T, H, K)
        return [r, k, v, F.logsigmoid(param(batch, T, H, K) + 2), param(H, K, scale=0.5)]
    if op == "ssd":  # H=8, P=32, G=1, N=64; dt, A as Mamba2 initialises them
        H, P, G, N = 8, 32, 1, 64
        dt = F.softplus(param(batch, T, H) - 4)
        A = -torch.empty(H).uniform_(1, 16, generator=g).to(device)
        return [act(batch, T, H, P), dt, A, act(batch, T, G, N), act(batch, T, G, N), param(H)]
    D, W = 384, 4
    return [act(batch, T, D), param(D, W, scale=W**-0.5), param(D, scale=0.1)]


def forward_backward(op, backend, inputs, cotangent):
    inputs = [t.detach().requires_grad_() for t in inputs]
    out = CALLS[op](backend, *inputs)
    return out, torch.autograd.grad(out, inputs, cotangent.to(out.dtype))


def rel_error(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp(min=1e-30)).item()


def median_ms(fn, device: str, reps: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def check(op, batch, dtype, device, candidate, reference, reps, warmup) -> dict:
    """One table row: candidate backend at ``dtype`` against the reference backend run in float64 on the
    same (already rounded) inputs; both are timed on the ``dtype`` inputs."""
    row = {"op": op, "dtype": str(dtype).removeprefix("torch."), "batch": batch}
    inputs = make_inputs(op, batch, dtype, device)
    exact_inputs = [t.double() for t in inputs]
    with torch.no_grad():
        shape = CALLS[op](candidate, *inputs).shape
    cotangent = torch.randn(shape, generator=torch.Generator().manual_seed(1)).to(device)

    out, grads = forward_backward(op, candidate, inputs, cotangent)
    exact_out, exact_grads = forward_backward(op, reference, exact_inputs, cotangent)
    finite = bool(torch.isfinite(out).all()) and all(bool(torch.isfinite(g).all()) for g in grads)
    row["fwd_err"] = rel_error(out, exact_out)
    row["grad_err"] = max(rel_error(g, r) for g, r in zip(grads, exact_grads))
    row["pass"] = finite and out.dtype == dtype and max(row["fwd_err"], row["grad_err"]) <= TOLERANCE[dtype]
    del exact_inputs, exact_out, exact_grads

    for name, backend in (("ref", reference), ("cand", candidate)):
        leaves = [t.detach().requires_grad_() for t in inputs]
        forward = functools.partial(CALLS[op], backend, *leaves)
        row[f"{name}_fwd"] = median_ms(forward, device, reps, warmup)
        both = functools.partial(forward_backward, op, backend, leaves, cotangent)
        row[f"{name}_fwdbwd"] = median_ms(both, device, reps, warmup)
    return row


def versions_line(device: str) -> str:
    def version(dist):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return "absent"

    gpu = torch.cuda.get_device_name() if device == "cuda" else "CPU only"
    packages = ", ".join(f"{d} {version(d)}" for d in ("fla-core", "mamba-ssm", "causal-conv1d", "triton"))
    f32_dot = os.environ.get("TRITON_F32_DEFAULT", "tf32 (Triton default)")
    return f"torch {torch.__version__} (CUDA {torch.version.cuda}), {gpu}; {packages}; fp32 tl.dot: {f32_dot}"


def table(rows, candidate_label, reference_label) -> str:
    head = (
        f"| op | dtype | batch | fwd rel err | grad rel err (max) | pass | {reference_label} ms fwd / fwd+bwd "
        f"| {candidate_label} ms fwd / fwd+bwd | speed-up fwd / fwd+bwd |"
    )
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        if "error" in r:
            lines.append(
                f"| {r['op']} | {r['dtype']} | {r['batch']} | - | - | FAIL: {r['error']} | - | - | - |"
            )
            continue
        lines.append(
            f"| {r['op']} | {r['dtype']} | {r['batch']} | {r['fwd_err']:.2e} | {r['grad_err']:.2e} "
            f"| {'yes' if r['pass'] else 'NO'} | {r['ref_fwd']:.3f} / {r['ref_fwdbwd']:.3f} "
            f"| {r['cand_fwd']:.3f} / {r['cand_fwdbwd']:.3f} "
            f"| {r['ref_fwd'] / r['cand_fwd']:.2f}x / {r['ref_fwdbwd'] / r['cand_fwdbwd']:.2f}x |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="smoke test: torch backend vs naive on CPU")
    parser.add_argument("--out", help="also write the markdown here")
    parser.add_argument("--batches", help="comma-separated batch sizes (default 8,64; --cpu: 8)")
    parser.add_argument("--fp32-tol", type=float, default=TOLERANCE[torch.float32], help="fp32 limit")
    parser.add_argument("--dtypes", default="fp32,bf16", help="comma-separated subset of fp32,bf16")
    parser.add_argument("--ops", default=",".join(CALLS), help="comma-separated subset of " + ",".join(CALLS))
    parser.add_argument("--reps", type=int, help="timed repetitions (default 50; --cpu: 3)")
    parser.add_argument("--warmup", type=int, help="untimed repetitions first (default 5; --cpu: 1)")
    args = parser.parse_args(argv)

    device = "cpu" if args.cpu else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("kernels.py: no CUDA device; run with --cpu for the CPU smoke test", file=sys.stderr)
        return 2
    TOLERANCE[torch.float32] = args.fp32_tol
    batches = [int(b) for b in (args.batches or ("8" if args.cpu else "8,64")).split(",")]
    reps = args.reps or (3 if args.cpu else 50)
    warmup = args.warmup if args.warmup is not None else (1 if args.cpu else 5)
    op_names = args.ops.split(",")
    dtypes = [{"fp32": torch.float32, "bf16": torch.bfloat16}[d] for d in args.dtypes.split(",")]
    if unknown := set(op_names) - set(CALLS):
        parser.error(f"unknown ops {sorted(unknown)}; choose from {', '.join(CALLS)}")

    labels = ("torch", "naive") if args.cpu else ("fused", "torch")
    rows = []
    for op in op_names:
        candidate, reference = ("torch", "naive") if args.cpu else (FUSED[op], "torch")
        for dtype in dtypes:
            for batch in batches:
                print(f"{op} {dtype} B={batch}: {candidate} vs {reference} ...", file=sys.stderr, flush=True)
                try:
                    rows.append(check(op, batch, dtype, device, candidate, reference, reps, warmup))
                except Exception as e:  # a failing kernel is a failed row, the others still run
                    traceback.print_exc()
                    reason = (str(e).splitlines() or [""])[0][:200].replace("|", "/")
                    rows.append({"op": op, "dtype": str(dtype)[6:], "batch": batch, "error": reason})
                print(table(rows[-1:], *labels).splitlines()[-1], file=sys.stderr, flush=True)
                if device == "cuda":
                    torch.cuda.empty_cache()

    report = f"{versions_line(device)}\n\n{table(rows, *labels)}\n"
    print(report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report)
    failed = [r for r in rows if "error" in r or not r["pass"]]
    if failed:
        print(f"kernels.py: {len(failed)} of {len(rows)} checks failed", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
