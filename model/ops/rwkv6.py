"""RWKV6 linear attention with data-dependent per-channel decay: naive recurrence, chunked PyTorch,
fla's fused chunk kernel."""

import torch
import torch.nn.functional as F

from model.ops._backend import fused_kernel, resolve, run_upcast
from model.ops.ssd import chunk_decays

# Chunk length of the torch version: it holds a [C, C] decay per channel, so work per token grows
# with C, while the state passing between chunks grows with (T / C)^2.
CHUNK_SIZE = 16


def rwkv6_naive(r, k, v, w, u):
    """o_t = r_t · (S_{t-1} + (u ⊙ k_t)ᵀ v_t),  S_t = diag(exp(w_t)) S_{t-1} + k_tᵀ v_t."""
    B, T, H, K = r.shape
    V = v.shape[-1]
    S = r.new_zeros(B, H, K, V)
    out = []
    for t in range(T):
        kv = k[:, t, :, :, None] * v[:, t, :, None, :]
        out.append(torch.einsum("bhk,bhkv->bhv", r[:, t], S + u[None, :, :, None] * kv))
        S = torch.exp(w[:, t])[..., None] * S + kv
    return torch.stack(out, dim=1)


def rwkv6_torch(r, k, v, w, u, chunk_size=CHUNK_SIZE):
    """Chunked RWKV6. Within a chunk every (query i, key j, channel) pair gets its own decay
    exp(w_{j+1} + ... + w_{i-1}), masked to -inf before exp where j >= i, so every exponent is <= 0 and
    strong decays underflow to 0 instead of overflowing. Log-decay sums restart at each chunk (bounded
    rounding); chunk states pass between chunks through exact segment sums (``chunk_decays``)."""
    B, T, H, K = r.shape
    n, L = -(-T // chunk_size), chunk_size
    pad = (0, 0, 0, 0, 0, n * L - T)  # zero steps at the end: decay 1, no input, outputs dropped
    r, k, v, w = (F.pad(t, pad).reshape(B, n, L, H, -1) for t in (r, k, v, w))
    # within chunk: log-decay through step i (incl) and before step i (excl); [B, n, L, H, K]
    w_incl = w.cumsum(2)
    w_excl = F.pad(w_incl[:, :, :-1], (0, 0, 0, 0, 1, 0))
    # S_{i-1} holds k_j v_j (j < i) decayed by steps j+1 .. i-1
    causal = torch.ones(L, L, dtype=torch.bool, device=r.device).tril(-1)[:, :, None, None]
    pair_decay = torch.where(causal, w_excl[:, :, :, None] - w_incl[:, :, None], -torch.inf).exp()
    scores = (r[:, :, :, None] * k[:, :, None] * pair_decay).sum(-1)  # [B, n, L_i, L_j, H]
    o = torch.einsum("bcijh,bcjhv->bcihv", scores, v) + (r * u * k).sum(-1, keepdim=True) * v
    # chunk c's own contribution to the state at its end, then the states entering each chunk z:
    # sum over c < z of state c decayed by chunks c+1 .. z-1
    w_total = w_incl[:, :, -1:]
    states = torch.einsum("bcjhk,bcjhv->bchkv", k * (w_total - w_incl).exp(), v)
    between = chunk_decays(w_total[:, :, 0].permute(0, 2, 3, 1))[..., :n, 1:]  # [B, H, K, z, c]
    start = torch.einsum("bhkzc,bchkv->bzhkv", between, states)
    o = o + torch.einsum("bcihk,bchkv->bcihv", r * w_excl.exp(), start)
    return o.reshape(B, n * L, H, -1)[:, :T]


def rwkv6(r, k, v, w, u, backend="torch"):
    """r, k, w: [B, T, H, K] (w: log-decay <= 0); v: [B, T, H, V]; u: [H, K]; scale 1 -> o: [B, T, H, V]."""
    impl = resolve("rwkv6", backend, (r, k, v, w, u))
    if impl == "naive":
        return run_upcast(rwkv6_naive, v.dtype, r, k, v, w, u)
    if impl == "torch":
        return run_upcast(rwkv6_torch, v.dtype, r, k, v, w, u)
    return fused_kernel("rwkv6")(r, k, v, w, u)
