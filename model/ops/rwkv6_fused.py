"""fla's chunk RWKV6 as PyTorch custom ops, so torch.compile and CUDA graphs take it whole.

fla's `chunk_rwkv6` is `torch.compiler.disable`d: under torch.compile it splits the graph at every layer,
and reduce-overhead then replays many small CUDA graphs with eager launches between them. Here its forward
and backward are each one opaque custom op (`torch.library.custom_op`) with a shape-only fake for tracing,
so Dynamo traces the whole model as one graph and the kernels are captured into it. The ops call fla's own
forward/backward functions (the ones its autograd.Function calls) with the same arguments, so the numbers
are fla's; each gradient is returned in its input's dtype. Imported only when the fused backend is asked
for (it imports fla).
"""

import torch
from fla.ops.rwkv6.chunk import (
    chunk_rwkv6_bwd,
    chunk_rwkv6_fwd,
    chunk_rwkv6_fwd_cumsum,
    chunk_rwkv6_fwd_intra,
)
from fla.ops.utils.constant import RCP_LN2
from torch import Tensor

RWKV6_CHUNK = 64  # fla's chunk length

# fla's forward also returns the intra-chunk score block A [B, T, H, RWKV6_CHUNK] (fp32) that its backward
# takes. A is allocated with new_empty and only its causal part is written (the sub-blocks above the
# diagonal, and columns past T in the last chunk, stay uninitialised; fla's kernels mask them on reading),
# so as an op output it is not a function of the inputs (torch.library.opcheck saw it differ between eager
# and AOT). chunk_rwkv6_bwd takes no A=None, so the forward op returns o alone and the backward op
# recomputes A with the same fla functions the forward uses (chunk_rwkv6_fwd_cumsum -> gi, ge;
# chunk_rwkv6_fwd_intra): the same kernels on the same inputs, so the gradients are fla's, and the block is
# not kept alive from forward to backward.


@torch.library.custom_op("hybrid_tuner::rwkv6_fwd", mutates_args=())
def rwkv6_fwd(r: Tensor, k: Tensor, v: Tensor, w: Tensor, u: Tensor) -> Tensor:
    r, k, v, w, u = (t.contiguous() for t in (r, k, v, w, u))
    with torch.cuda.device(r.device):
        _, _, _, o = chunk_rwkv6_fwd(
            q=r, k=k, v=v, g=w, u=u, scale=1.0, initial_state=None, output_final_state=False,
            chunk_size=RWKV6_CHUNK,
        )  # fmt: skip
    return o.to(v.dtype)


@rwkv6_fwd.register_fake
def _(r, k, v, w, u):
    return torch.empty_like(v)


@torch.library.custom_op("hybrid_tuner::rwkv6_bwd", mutates_args=())
def rwkv6_bwd(
    r: Tensor, k: Tensor, v: Tensor, w: Tensor, u: Tensor, do: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    r, k, v, w, u, do = (t.contiguous() for t in (r, k, v, w, u, do))
    with torch.cuda.device(r.device):
        # A as chunk_rwkv6_fwd computes it (its first two steps, same arguments)
        gi, ge = chunk_rwkv6_fwd_cumsum(w, chunk_size=RWKV6_CHUNK, scale=RCP_LN2)
        A = chunk_rwkv6_fwd_intra(q=r, k=k, gi=gi, ge=ge, u=u, scale=1.0, chunk_size=RWKV6_CHUNK)
        dr, dk, dv, dw, du, _ = chunk_rwkv6_bwd(
            q=r, k=k, v=v, g=w, u=u, scale=1.0, initial_state=None, A=A, do=do, dht=None,
            chunk_size=RWKV6_CHUNK,
        )  # fmt: skip
    return dr.to(r.dtype), dk.to(k.dtype), dv.to(v.dtype), dw.to(w.dtype), du.to(u.dtype)


@rwkv6_bwd.register_fake
def _(r, k, v, w, u, do):
    return tuple(torch.empty_like(t) for t in (r, k, v, w, u))


def _rwkv6_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _rwkv6_backward(ctx, do):
    return rwkv6_bwd(*ctx.saved_tensors, do)


rwkv6_fwd.register_autograd(_rwkv6_backward, setup_context=_rwkv6_setup)


def rwkv6_fla(r: Tensor, k: Tensor, v: Tensor, w: Tensor, u: Tensor) -> Tensor:
    """fla's chunk RWKV6 with scale 1, no initial state: o [B, T, H, V]."""
    return rwkv6_fwd(r, k, v, w, u)
