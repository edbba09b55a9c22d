"""causal-conv1d's CUDA kernels as PyTorch custom ops, so torch.compile and CUDA graphs take them whole.

`causal_conv1d_fn` wraps its extension in custom ops that write into an `out=` tensor allocated outside
them (`torch.empty_like(x)`, non-contiguous for a channel-last x), which Dynamo refuses under fullgraph.
Here the forward and backward are each one opaque custom op that allocates its own outputs, with a
shape-only fake (see model/ops/rwkv6_fused.py for why). They call the extension `causal_conv1d_cuda` with
the arguments `causal_conv1d_interface.CausalConv1dFn` passes (no seq_idx, initial or final states), so
the numbers are causal-conv1d's. Imported only when the fused backend is asked for (it imports the
extension).
"""

import causal_conv1d_cuda
import torch
from torch import Tensor


def _as_kernel_layout(x: Tensor) -> tuple[Tensor, bool]:
    """x [B, T, D] as the kernel's [B, D, T]: a channel-last view when the kernel takes it (D and the
    strides multiples of 8, as its TORCH_CHECKs ask), else contiguous [B, D, T]; and whether channel-last."""
    xt = x.transpose(1, 2)
    if xt.stride(1) == 1 and xt.stride(0) % 8 == 0 and xt.stride(2) % 8 == 0 and xt.shape[1] % 8 == 0:
        return xt, True
    return xt.contiguous(), False


def _like_layout(t: Tensor, channel_last: bool) -> Tensor:
    """t [B, T, D] (dout) as [B, D, T] in the kernel layout of x: the kernel asks dout and dx to match x."""
    return t.contiguous().transpose(1, 2) if channel_last else t.transpose(1, 2).contiguous()


def _empty_out(x: Tensor, channel_last: bool) -> Tensor:
    """An empty [B, D, T] in x's kernel layout; its transpose(1, 2) is [B, T, D], contiguous if channel-last."""
    B, T, D = x.shape
    if channel_last:
        return torch.empty(B, T, D, dtype=x.dtype, device=x.device).transpose(1, 2)
    return torch.empty(B, D, T, dtype=x.dtype, device=x.device)


@torch.library.custom_op("hybrid_tuner::causal_conv1d_fwd", mutates_args=())
def causal_conv1d_fwd(x: Tensor, weight: Tensor, bias: Tensor | None, silu: bool) -> Tensor:
    xt, channel_last = _as_kernel_layout(x)
    out = _empty_out(x, channel_last)
    bias = bias.contiguous() if bias is not None else None
    # (x, weight, bias, seq_idx, initial_states, out, final_states_out, silu_activation)
    causal_conv1d_cuda.causal_conv1d_fwd(xt, weight.contiguous(), bias, None, None, out, None, silu)
    return out.transpose(1, 2).contiguous()  # [B, T, D]; a copy only for the [B, D, T] layout


@causal_conv1d_fwd.register_fake
def _(x, weight, bias, silu):
    return x.new_empty(x.shape)


@torch.library.custom_op("hybrid_tuner::causal_conv1d_bwd", mutates_args=())
def causal_conv1d_bwd(
    dout: Tensor, x: Tensor, weight: Tensor, bias: Tensor | None, silu: bool
) -> tuple[Tensor, Tensor, Tensor]:
    """dx, dweight, dbias; dbias is an empty [0] tensor when bias is None (a custom op returns no None)."""
    xt, channel_last = _as_kernel_layout(x)
    dx = _empty_out(x, channel_last)
    # the kernel accumulates dweight / dbias in fp32 (causal_conv1d's cpp_functions zero them too)
    dweight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
    dbias = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device) if bias is not None else None
    bias_c = bias.contiguous() if bias is not None else None
    # (x, weight, bias, dout, seq_idx, initial_states, dfinal_states, dx, dweight, dbias, dinitial_states,
    #  silu_activation)
    causal_conv1d_cuda.causal_conv1d_bwd(
        xt, weight.contiguous(), bias_c, _like_layout(dout, channel_last), None, None, None, dx, dweight, dbias,
        None, silu,
    )  # fmt: skip
    dbias = dbias.to(bias.dtype) if dbias is not None and bias is not None else weight.new_empty(0)
    return dx.transpose(1, 2).contiguous(), dweight.to(weight.dtype), dbias


@causal_conv1d_bwd.register_fake
def _(dout, x, weight, bias, silu):
    dbias = weight.new_empty(0) if bias is None else bias.new_empty(bias.shape)
    return x.new_empty(x.shape), weight.new_empty(weight.shape), dbias


def _conv_setup(ctx, inputs, output):
    x, weight, bias, silu = inputs
    ctx.save_for_backward(x, weight, bias)
    ctx.silu = silu


def _conv_backward(ctx, dout):
    x, weight, bias = ctx.saved_tensors
    dx, dweight, dbias = causal_conv1d_bwd(dout, x, weight, bias, ctx.silu)
    return dx, dweight, dbias if bias is not None else None, None


causal_conv1d_fwd.register_autograd(_conv_backward, setup_context=_conv_setup)


def causal_conv1d_fused(x: Tensor, weight: Tensor, bias: Tensor | None = None, activation=None) -> Tensor:
    """causal-conv1d's kernel: x [B, T, D], weight [D, W] (W in 2..4), bias [D] or None, activation None or
    "silu"; y [B, T, D] in x's dtype (weight and bias may be another float dtype)."""
    bias = bias.to(weight.dtype) if bias is not None else None  # the kernel takes bias in weight's dtype
    return causal_conv1d_fwd(x, weight, bias, activation == "silu")
