"""Mamba2 SSD scan: naive recurrence, chunked PyTorch (after mamba's ssd_minimal), mamba_ssm's fused kernel."""

import functools

import torch
import torch.nn.functional as F

from model.ops._backend import fused_kernel, resolve, run_upcast


def ssd_naive(x, dt, A, B, C, D=None):
    """h_t = exp(dt_t A) h_{t-1} + dt_t x_t ⊗ B_t,  y_t = C_t · h_t + D x_t."""
    b, T, H, P = x.shape
    G, N = B.shape[2], B.shape[3]
    rep = H // G
    Bh = B.repeat_interleave(rep, dim=2)
    Ch = C.repeat_interleave(rep, dim=2)
    h = x.new_zeros(b, H, P, N)
    ys = []
    for t in range(T):
        decay = torch.exp(dt[:, t] * A)[..., None, None]
        h = decay * h + (dt[:, t, :, None, None] * x[:, t, :, :, None]) * Bh[:, t, :, None, :]
        ys.append(torch.einsum("bhpn,bhn->bhp", h, Ch[:, t]))
    y = torch.stack(ys, dim=1)
    if D is not None:
        y = y + D[None, None, :, None] * x
    return y


def segsum(a):
    """out[..., i, j] = a[..., j+1 : i+1].sum(-1) for j <= i, -inf above the diagonal.

    A masked cumsum (mamba's stable segsum), not a difference of prefix sums: every entry is a sum of
    the log-decays it covers, so exp(out) is exact and never overflows however strong the decay.
    With a zero prepended to ``a``, column 0 holds prefix sums and the last row suffix sums.
    """
    L = a.shape[-1]
    tril = torch.ones(L, L, dtype=torch.bool, device=a.device).tril
    out = a[..., :, None].expand(*a.shape, L).masked_fill(~tril(-1), 0).cumsum(-2)
    return out.masked_fill(~tril(0), -torch.inf)


def chunk_decays(a):
    """exp(segsum) of the log-decays ``a`` [..., L] with a zero prepended: [..., L+1, L+1] where
    [i+1, j+1] is the decay from after step j to after step i (i >= j), [i, 0] from the start to before
    step i, [L, j+1] from after step j to the end, and [i, j+1] (i <= j) is 0."""
    return segsum(F.pad(a, (1, 0))).exp()


def ssd_torch(x, dt, A, B, C, D=None, chunk_size=64):
    """Chunked SSD: quadratic (attention-like) within chunks of ``chunk_size``, states between them."""
    b, T, H, P = x.shape
    G, N = B.shape[2], B.shape[3]
    n, L = -(-T // chunk_size), chunk_size
    pad = (0, 0, 0, 0, 0, n * L - T)  # zero steps at the end: decay 1, no input, outputs dropped
    # heads as [G, H/G] so B and C are shared by their group without copies
    xdt = F.pad((x * dt[..., None]).reshape(b, T, G, H // G, P), (0, 0) + pad)
    a = F.pad((dt * A).reshape(b, T, G, H // G), pad)  # log-decay per step
    xdt, a = xdt.reshape(b, n, L, G, H // G, P), a.reshape(b, n, L, G, H // G)
    B, C = (F.pad(t, pad).reshape(b, n, L, G, N) for t in (B, C))

    # einsum letters: c chunk, i/j step in chunk, g group, r head in group, p head dim, s state dim
    decay = chunk_decays(a.permute(0, 1, 3, 4, 2))  # [b, c, g, r, L+1, L+1]
    y = torch.einsum("bcigs,bcjgs,bcgrij,bcjgrp->bcigrp", C, B, decay[..., 1:, 1:], xdt)
    to_end = decay[..., L, 1:].permute(0, 1, 4, 2, 3)[..., None]  # [b, c, j, g, r, 1]
    states = torch.einsum("bcjgs,bcjgrp->bcgrps", B, xdt * to_end)
    # state entering chunk z: sum over c < z of chunk c's state, decayed by chunks c+1 .. z-1
    between = chunk_decays(a.sum(2).permute(0, 2, 3, 1))[..., :n, 1:]  # [b, g, r, z, c]
    start = torch.einsum("bgrzc,bcgrps->bzgrps", between, states)
    from_start = decay[..., 1:, 0].permute(0, 1, 4, 2, 3)[..., None]  # [b, c, i, g, r, 1]
    y = y + torch.einsum("bcigs,bcgrps->bcigrp", C, start) * from_start
    y = y.reshape(b, n * L, H, P)[:, :T]
    if D is not None:
        y = y + D.view(H, -1) * x
    return y


def ssd(x, dt, A, B, C, D=None, backend="torch", chunk_size=64):
    """x: [B, T, H, P]; dt: [B, T, H] (after softplus); A: [H] (< 0); B, C: [B, T, G, N]; D: [H] or None."""
    impl = resolve("ssd", backend, (x, dt, A, B, C) + ((D,) if D is not None else ()))
    if impl == "naive":
        return run_upcast(ssd_naive, x.dtype, x, dt, A, B, C, D)
    if impl == "torch":
        return run_upcast(functools.partial(ssd_torch, chunk_size=chunk_size), x.dtype, x, dt, A, B, C, D)
    return fused_kernel("ssd")(x, dt, A, B, C, chunk_size, D=D)
