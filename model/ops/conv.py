"""Causal depthwise conv1d: sum over taps, torch conv1d, or causal_conv1d's fused kernel."""

import torch.nn.functional as F

from model.ops._backend import fused_kernel, resolve

ACTIVATIONS = (None, "silu")


def causal_conv1d_naive(x, weight, bias=None, activation=None):
    """y_t = act(bias + sum_i weight[:, i] * x_{t-W+1+i}), x_{<0} = 0."""
    T, W = x.shape[1], weight.shape[-1]
    xp = F.pad(x, (0, 0, W - 1, 0))
    y = sum(xp[:, i : i + T] * weight[:, i].to(x.dtype) for i in range(W))
    y = y if bias is None else y + bias.to(x.dtype)
    return F.silu(y) if activation == "silu" else y


def causal_conv1d_torch(x, weight, bias=None, activation=None):
    # parameters follow the activations' dtype (fp32 weights with bf16 x outside autocast)
    W, bias = weight.shape[-1], bias.to(x.dtype) if bias is not None else None
    y = F.conv1d(x.transpose(1, 2), weight[:, None, :].to(x.dtype), bias, padding=W - 1, groups=x.shape[-1])
    y = y[..., : x.shape[1]].transpose(1, 2)
    return F.silu(y) if activation == "silu" else y


def _causal_conv1d_fused(x, weight, bias=None, activation=None):
    # model.ops.conv_fused: the kernel as custom ops; the channel-last / contiguous choice is made inside them
    return fused_kernel("causal_conv1d")(x, weight, bias, activation)


def causal_conv1d(x, weight, bias=None, activation=None, backend="torch"):
    """x: [B, T, D]; weight: [D, W]; bias: [D] or None; activation: None or "silu"."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"causal_conv1d: activation must be one of {ACTIVATIONS}, got {activation!r}")
    W = weight.shape[-1]
    unsupported = None if 2 <= W <= 4 else f"the kernel takes widths 2..4, got {W}"
    tensors = (x, weight) + ((bias,) if bias is not None else ())
    impl = resolve("causal_conv1d", backend, tensors, unsupported)
    if impl == "naive":
        return causal_conv1d_naive(x, weight, bias, activation)
    if impl == "torch":
        return causal_conv1d_torch(x, weight, bias, activation)
    return _causal_conv1d_fused(x, weight, bias, activation)
