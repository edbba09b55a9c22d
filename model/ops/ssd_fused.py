"""mamba_ssm's chunked SSD scan as PyTorch custom ops, so torch.compile and CUDA graphs take it whole.

`mamba_chunk_scan_combined` is a Python autograd.Function around Triton launches, which Dynamo splits the
graph around; here its forward and backward are each one opaque custom op with a shape-only fake (see
model/ops/rwkv6_fused.py for why). They call mamba_ssm's own `_mamba_chunk_scan_combined_fwd/_bwd`, as
its autograd.Function does. Imported only when the fused backend is asked for (it imports mamba_ssm).
"""

import torch
from mamba_ssm.ops.triton.ssd_combined import _mamba_chunk_scan_combined_bwd, _mamba_chunk_scan_combined_fwd
from torch import Tensor


@torch.library.custom_op("hybrid_tuner::ssd_fwd", mutates_args=())
def ssd_fwd(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Tensor, chunk_size: int) -> Tensor:
    with torch.cuda.device(x.device):
        out = _mamba_chunk_scan_combined_fwd(x, dt, A, B, C, chunk_size, D=D)[0]
    return out.to(x.dtype)


@ssd_fwd.register_fake
def _(x, dt, A, B, C, D, chunk_size):
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


@torch.library.custom_op("hybrid_tuner::ssd_bwd", mutates_args=())
def ssd_bwd(
    dout: Tensor,
    x: Tensor,
    dt: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    D: Tensor,
    out: Tensor,
    chunk_size: int,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    with torch.cuda.device(x.device):
        dx, ddt, dA, dB, dC, dD, *_ = _mamba_chunk_scan_combined_bwd(
            dout.contiguous(), x, dt, A, B, C, out, chunk_size, D=D
        )
    return tuple(g.to(t.dtype) for g, t in zip((dx, ddt, dA, dB, dC, dD), (x, dt, A, B, C, D)))


@ssd_bwd.register_fake
def _(dout, x, dt, A, B, C, D, out, chunk_size):
    return tuple(torch.empty(t.shape, dtype=t.dtype, device=t.device) for t in (x, dt, A, B, C, D))


def _ssd_setup(ctx, inputs, output):
    x, dt, A, B, C, D, chunk_size = inputs
    ctx.save_for_backward(x, dt, A, B, C, D, output)
    ctx.chunk_size = chunk_size


def _ssd_backward(ctx, dout):
    x, dt, A, B, C, D, out = ctx.saved_tensors
    return (*ssd_bwd(dout, x, dt, A, B, C, D, out, ctx.chunk_size), None)


ssd_fwd.register_autograd(_ssd_backward, setup_context=_ssd_setup)


def ssd_mamba(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, chunk_size: int, D=None) -> Tensor:
    """mamba_ssm's chunked SSD scan (dt already through softplus, no z, no dt bias): y [B, T, H, P]."""
    if D is None:  # the op takes a D always; zeros add nothing
        D = torch.zeros(x.shape[2], dtype=torch.float32, device=x.device)
    return ssd_fwd(x, dt, A, B, C, D, chunk_size)
