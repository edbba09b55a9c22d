"""The chunked torch ops against their naive recurrences (the definitions), plus backend selection."""

import importlib.util

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from model import ops
from model.ops._backend import load_fused
from model.ops.conv import causal_conv1d_naive
from model.ops.rwkv6 import rwkv6_naive, rwkv6_torch
from model.ops.ssd import ssd_naive, ssd_torch

SETTINGS = settings(max_examples=25, deadline=None)
F64 = torch.float64


def rwkv6_inputs(B, T, H, K, V, decay_scale=1.0, dtype=F64, seed=0):
    """r, k, v, w, u with log-decays w in [-decay_scale, 0)."""
    g = torch.Generator().manual_seed(seed)
    r, k = torch.randn(2, B, T, H, K, generator=g, dtype=dtype).unbind(0)
    v = torch.randn(B, T, H, V, generator=g, dtype=dtype)
    w = -decay_scale * torch.rand(B, T, H, K, generator=g, dtype=dtype).clamp(min=1e-3)
    return [r, k, v, w, torch.randn(H, K, generator=g, dtype=dtype)]


def ssd_inputs(b, T, H, P, G, N, dt_scale=1.0, dtype=F64, seed=0):
    """x, dt, A, B, C, D with dt * A in [-2 * dt_scale, 0)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, T, H, P, generator=g, dtype=dtype)
    dt = dt_scale * torch.rand(b, T, H, generator=g, dtype=dtype).clamp(min=1e-3)
    A = -(torch.rand(H, generator=g, dtype=dtype) + 1)
    B, C = torch.randn(2, b, T, G, N, generator=g, dtype=dtype).unbind(0)
    return [x, dt, A, B, C, torch.randn(H, generator=g, dtype=dtype)]


def value_and_grads(fn, inputs):
    """fn(*inputs) and the gradients of <fn(*inputs), fixed random cotangent> w.r.t. every input."""
    inputs = [t.detach().clone().requires_grad_() for t in inputs]
    out = fn(*inputs)
    cotangent = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=out.dtype)
    # allow_unused: the naive recurrence never reads the last step's decay (it only shapes S_T)
    grads = torch.autograd.grad(out, inputs, cotangent, allow_unused=True, materialize_grads=True)
    return out, grads


def assert_same_values_and_grads(fast, reference, inputs, rtol=1e-10, atol=1e-10):
    out, grads = value_and_grads(fast, inputs)
    ref_out, ref_grads = value_and_grads(reference, inputs)
    assert torch.isfinite(out).all() and all(torch.isfinite(g).all() for g in grads)
    torch.testing.assert_close(out, ref_out, rtol=rtol, atol=atol)
    for i, (g, ref) in enumerate(zip(grads, ref_grads)):
        torch.testing.assert_close(g, ref, rtol=rtol, atol=atol, msg=lambda m, i=i: f"grad of input {i}: {m}")


@SETTINGS
@given(
    B=st.integers(1, 2),
    T=st.integers(1, 40),
    H=st.integers(1, 3),
    K=st.integers(1, 5),
    V=st.integers(1, 5),
    chunk=st.sampled_from([1, 4, 8, 16]),
    seed=st.integers(0, 2**16),
)
def test_rwkv6_chunked_matches_recurrence(B, T, H, K, V, chunk, seed):
    inputs = rwkv6_inputs(B, T, H, K, V, decay_scale=2.0, seed=seed)
    assert_same_values_and_grads(lambda *a: rwkv6_torch(*a, chunk_size=chunk), rwkv6_naive, inputs)


@SETTINGS
@given(
    b=st.integers(1, 2),
    T=st.integers(1, 40),
    G=st.integers(1, 2),
    heads_per_group=st.integers(1, 3),
    P=st.integers(1, 4),
    N=st.integers(1, 5),
    chunk=st.sampled_from([1, 4, 8, 16, 64]),
    with_D=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_ssd_chunked_matches_recurrence(b, T, G, heads_per_group, P, N, chunk, with_D, seed):
    inputs = ssd_inputs(b, T, G * heads_per_group, P, G, N, seed=seed)
    if not with_D:
        inputs = inputs[:5]
    assert_same_values_and_grads(lambda *a: ssd_torch(*a, chunk_size=chunk), ssd_naive, inputs)


@pytest.mark.parametrize("T, chunk", [(32, 16), (37, 16), (16, 64)])
def test_chunk_boundaries_divide_or_not(T, chunk):
    """Explicit cases on top of hypothesis: T a multiple of the chunk, not a multiple, shorter than it."""
    inputs = rwkv6_inputs(2, T, 2, 4, 3)
    assert_same_values_and_grads(lambda *a: rwkv6_torch(*a, chunk_size=chunk), rwkv6_naive, inputs)
    inputs = ssd_inputs(2, T, 4, 3, 2, 4)
    assert_same_values_and_grads(lambda *a: ssd_torch(*a, chunk_size=chunk), ssd_naive, inputs)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_strong_decays_stay_finite_and_exact(dtype):
    """w down to -20 per step (RWKV6) and dt * A down to -50 (SSD): the usual exp(W_t) * exp(-W_s)
    factorisation overflows here (exp(20 * 16) > float32 max)."""
    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {}
    inputs = rwkv6_inputs(2, 70, 2, 4, 3, decay_scale=20.0, dtype=dtype, seed=3)
    inputs[3][:, 20:40] = -20.0  # a run of the strongest decay, then weaker ones again
    assert_same_values_and_grads(rwkv6_torch, rwkv6_naive, inputs, **tol)
    inputs = ssd_inputs(2, 70, 4, 3, 2, 4, dt_scale=25.0, dtype=dtype, seed=3)
    inputs[1][:, 20:40], inputs[2][0] = 25.0, -2.0  # dt * A = -50 for head 0, in [-50, -25] for the others
    assert_same_values_and_grads(lambda *a: ssd_torch(*a, chunk_size=16), ssd_naive, inputs, **tol)


@pytest.mark.parametrize("backend", ["torch", "naive"])
@pytest.mark.parametrize("mixed", [False, True])
def test_bf16_inputs_return_bf16_close_to_fp32(backend, mixed):
    """All-bf16 inputs, and model.hybrid's mix under autocast (bf16 activations, fp32 decays/params)."""
    rwkv = rwkv6_inputs(2, 50, 2, 8, 8, dtype=torch.float32)
    ssd = ssd_inputs(2, 50, 4, 8, 2, 8, dtype=torch.float32)
    cases = [
        (lambda *a: ops.rwkv6(*a, backend=backend), rwkv, {0, 1, 2}),  # r, k, v
        (lambda *a: ops.ssd(*a, backend=backend, chunk_size=16), ssd, {0, 3, 4}),  # x, B, C
    ]
    for op, inputs, activations in cases:
        low = [t.bfloat16() if i in activations or not mixed else t for i, t in enumerate(inputs)]
        out = op(*low)
        assert out.dtype == torch.bfloat16
        # the same rounded inputs in fp32: only the output rounding and fp32 accumulation differ
        ref = op(*[t.float() for t in low])
        assert (out.float() - ref).norm() / ref.norm() < 1e-2
        grads = torch.autograd.grad(op(*[t.requires_grad_() for t in low]).float().sum(), low)
        assert all(g.dtype == t.dtype and torch.isfinite(g).all() for g, t in zip(grads, low))


def test_conv_matches_direct_formula():
    g = torch.Generator().manual_seed(0)
    x, weight, bias = (
        torch.randn(2, 9, 6, generator=g),
        torch.randn(6, 3, generator=g),
        torch.randn(6, generator=g),
    )
    # y_t = w0 x_{t-2} + w1 x_{t-1} + w2 x_t + bias, written out
    xp = F.pad(x, (0, 0, 2, 0))
    direct = weight[:, 0] * xp[:, :-2] + weight[:, 1] * xp[:, 1:-1] + weight[:, 2] * xp[:, 2:] + bias
    for backend in ("naive", "torch", "auto"):
        torch.testing.assert_close(ops.causal_conv1d(x, weight, bias, backend=backend), direct)
        silu = ops.causal_conv1d(x, weight, bias, activation="silu", backend=backend)
        torch.testing.assert_close(silu, F.silu(direct))
    torch.testing.assert_close(ops.causal_conv1d(x, weight), direct - bias)


def test_conv_gradients_match_naive():
    g = torch.Generator().manual_seed(1)
    inputs = [torch.randn(2, 11, 5, generator=g, dtype=F64), torch.randn(5, 4, generator=g, dtype=F64)]
    inputs.append(torch.randn(5, generator=g, dtype=F64))
    fast = lambda *a: ops.causal_conv1d(*a, activation="silu", backend="torch")
    assert_same_values_and_grads(fast, lambda *a: causal_conv1d_naive(*a, activation="silu"), inputs)


def test_public_entry_points_dispatch():
    """backend="naive" / "torch" / "auto" (CPU -> torch) give the same result through model.ops."""
    rwkv = rwkv6_inputs(1, 20, 2, 4, 4)
    ssd = ssd_inputs(1, 20, 2, 3, 1, 4)
    ref_rwkv, ref_ssd = rwkv6_naive(*rwkv), ssd_naive(*ssd)
    for backend in ("naive", "torch", "auto"):
        torch.testing.assert_close(ops.rwkv6(*rwkv, backend=backend), ref_rwkv)
        torch.testing.assert_close(ops.ssd(*ssd, backend=backend, chunk_size=8), ref_ssd)
    # strided views, as the model passes them (head-major transposes, slices of one projection)
    strided_rwkv = [t.transpose(1, 2).contiguous().transpose(1, 2) for t in rwkv[:4]] + rwkv[4:]
    torch.testing.assert_close(ops.rwkv6(*strided_rwkv), ref_rwkv)
    x, dt, A, B, C, D = ssd
    packed = torch.cat([x.flatten(2), B.flatten(2), C.flatten(2)], dim=-1)
    x_, B_, C_ = packed.split([x[0, 0].numel(), B[0, 0].numel(), C[0, 0].numel()], dim=-1)
    strided_ssd = [x_.reshape(x.shape), dt, A, B_.reshape(B.shape), C_.reshape(C.shape), D]
    assert not strided_ssd[0].is_contiguous()
    torch.testing.assert_close(ops.ssd(*strided_ssd, chunk_size=8), ref_ssd)


def test_bad_backends_raise_one_clear_line():
    rwkv = rwkv6_inputs(1, 4, 1, 2, 2)
    ssd = ssd_inputs(1, 4, 1, 2, 1, 2)
    conv = [torch.randn(1, 4, 8), torch.randn(8, 4)]
    calls = {
        "rwkv6": lambda backend: ops.rwkv6(*rwkv, backend=backend),
        "ssd": lambda backend: ops.ssd(*ssd, backend=backend),
        "causal_conv1d": lambda backend: ops.causal_conv1d(*conv, backend=backend),
    }
    fused = {"rwkv6": "fla", "ssd": "mamba_ssm", "causal_conv1d": "mamba_ssm"}
    for op, call in calls.items():
        with pytest.raises(
            ValueError, match=rf"{op}: unknown backend 'cuda'; allowed: naive, torch, {fused[op]}, auto"
        ):
            call("cuda")
        # the fused kernel on CPU tensors: refused with the reason, never a silent fallback
        with pytest.raises(
            ValueError, match=rf"backend '{fused[op]}' cannot run: it needs CUDA tensors, got cpu"
        ):
            call(fused[op])
    with pytest.raises(ValueError, match="activation must be one of"):
        ops.causal_conv1d(*conv, activation="relu")


def test_available_backends_reports_reasons():
    available = ops.available_backends()
    assert available["naive"] is True and available["torch"] is True
    assert set(available) == {"naive", "torch", "fla", "mamba_ssm"}
    for name in ("fla", "mamba_ssm"):
        value = available[name]
        assert value is True or (isinstance(value, str) and "\n" not in value and value)
    if not torch.cuda.is_available():
        assert available["fla"] is not True and available["mamba_ssm"] is not True


@pytest.mark.skipif(
    importlib.util.find_spec("causal_conv1d_cuda") is not None, reason="causal-conv1d is installed"
)
def test_missing_conv_kernel_is_one_line_naming_its_module():
    """Without causal-conv1d, model.ops.conv_fused fails at import (not at the first call) with one line."""
    kernel, why = load_fused("causal_conv1d")
    assert kernel is None and "\n" not in why
    assert why.startswith("model.ops.conv_fused.causal_conv1d_fused is not importable (ModuleNotFoundError")
    assert "causal_conv1d_cuda" in why


def test_a_model_built_for_fused_kernels_imports_them_before_any_trace(monkeypatch):
    """A first import inside a compiled forward is a graph break (fullgraph and CUDA graphs refuse it): the
    model loads its fused kernels when it is built, and a torch-kernel model loads none."""
    from model.hybrid import HybridConfig, HybridLM
    from model.ops import _backend

    monkeypatch.setattr(_backend, "_loaded", {})
    HybridLM(HybridConfig(d_model=32, n_layers=1, kernels="torch"))
    assert _backend._loaded == {}
    HybridLM(HybridConfig(d_model=32, n_layers=1, kernels="fused"))
    assert set(_backend._loaded) == {"rwkv6", "ssd", "causal_conv1d"}
