"""Hybrid RWKV6 + Mamba2 character LM, one file top to bottom.

    idx -> embedding -> n_layers x HybridBlock -> RMSNorm -> lm_head -> logits

HybridBlock (the seed "RwMBA" block, with the real mixers):

    h = RMSNorm(x)
    x = x + g_r * RMSNorm(RWKV6TimeMix(h)) + g_m * RMSNorm(Mamba2Mixer(h))  # gains init 0.7 / 0.3
    x = x + FeedForward(x)                                                   # pre-norm GELU MLP, 4x

- RWKV6TimeMix is RWKV-6 "Finch" (BlinkDL RWKV-LM v6, fla's RWKV6Attention): token shift with the
  low-rank data-dependent lerp ("ddlerp") for the w, k, v, r, g streams, data-dependent per-channel
  decay w_t = -exp(time_decay + tanh(xw W1) W2) handed to the op as a log-decay, bonus u (time_faaaa),
  per-head GroupNorm (eps 64e-5), silu(g) gate, output projection. Inits follow RWKV's layer-dependent
  recipes (time_maa, decay speed, faaaa zigzag; LoRA W1 zero and W2 U(-0.01, 0.01)).
- Mamba2Mixer is mamba_ssm's Mamba2: in_proj -> [z, xBC, dt]; causal depthwise conv + SiLU on xBC;
  dt = softplus(dt + dt_bias); A = -exp(A_log); SSD scan with D skip; gated RMSNorm y = norm(y * silu(z));
  out_proj. Parameter names follow mamba_ssm (in_proj, conv1d.weight [D, 1, W], dt_bias, A_log, D,
  norm.weight, out_proj) and do not depend on the kernels choice, so checkpoints move between backends.
- The feed-forward: the seed only called it "feed-forward". We use a plain GELU MLP rather than RWKV's
  channel-mix (token shift + squared ReLU) or a Mamba-style gated MLP, so the FFN favours neither mixer.

Init: nn.Linear and nn.Embedding weights ~ N(0, 0.02) (nanoGPT). The FFN's output projection, the only
thing written straight into the residual stream, is scaled by 1 / sqrt(2 * n_layers) (GPT-2). The mixers'
output projections stay at 0.02 and are not zeroed: their outputs pass through an RMSNorm, which would
make a zero output's gradient blow up, and which removes their scale anyway (the gains set it).
The mixers' own parameters keep the RWKV / Mamba recipes. Embedding and lm_head are untied, as in the seed.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import cast

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn

from model import ops
from model.config import KERNELS, OP_BACKENDS, OPS, HybridConfig  # noqa: F401 - HybridConfig re-exported


class RMSNorm(nn.Module):
    """RMSNorm computed in float32, optionally gated (x * silu(gate), then normalised: Mamba2's
    norm_before_gate=False) and optionally per group of ``group_size`` channels (Mamba2 with ngroups > 1)."""

    def __init__(self, dim: int, eps: float = 1e-5, group_size: int | None = None):
        super().__init__()
        self.eps = eps
        self.group_size = group_size or dim
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor, gate: torch.Tensor | None = None) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        if gate is not None:
            x = x * F.silu(gate.float())
        x = x.unflatten(-1, (-1, self.group_size))
        x = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)).flatten(-2)
        return (x * self.weight).to(dtype)


class RWKV6TimeMix(nn.Module):
    """RWKV-6 time mixing ("Finch"); d_att = d_model."""

    def __init__(self, cfg: HybridConfig, layer_id: int):
        super().__init__()
        C, H = cfg.d_model, cfg.rwkv_n_heads
        self.n_heads, self.head_size = H, C // H
        self.backend = cfg.op_backends[0]
        mix_rank, decay_rank = cfg.rwkv_mix_lora_rank, cfg.rwkv_decay_lora_rank

        # RWKV's layer-dependent inits: early layers mix in more of the previous token and decay faster.
        ratio_0_to_1 = layer_id / max(cfg.n_layers - 1, 1)
        ratio_1_to_almost0 = 1.0 - layer_id / cfg.n_layers
        ddd = torch.arange(C, dtype=torch.float32) / C
        self.time_maa_x = nn.Parameter(1.0 - ddd.pow(ratio_1_to_almost0))
        # Rows w, k, v, r, g.
        self.time_maa = nn.Parameter(
            torch.stack(
                [
                    1.0 - ddd.pow(ratio_1_to_almost0),
                    1.0 - ddd.pow(ratio_1_to_almost0),
                    1.0 - (ddd.pow(ratio_1_to_almost0) + 0.3 * ratio_0_to_1),
                    1.0 - ddd.pow(0.5 * ratio_1_to_almost0),
                    1.0 - ddd.pow(0.5 * ratio_1_to_almost0),
                ]
            )
        )
        self.time_maa_w1 = nn.Parameter(torch.zeros(C, 5 * mix_rank))
        self.time_maa_w2 = nn.Parameter(torch.empty(5, mix_rank, C).uniform_(-0.01, 0.01))

        n = torch.arange(C, dtype=torch.float32)
        span = max(C - 1, 1)
        self.time_decay = nn.Parameter(-6 + 5 * (n / span).pow(0.7 + 1.3 * ratio_0_to_1))
        self.time_decay_w1 = nn.Parameter(torch.zeros(C, decay_rank))
        self.time_decay_w2 = nn.Parameter(torch.empty(decay_rank, C).uniform_(-0.01, 0.01))
        zigzag = ((n + 1) % 3 - 1) * 0.1
        self.time_faaaa = nn.Parameter((ratio_0_to_1 * (1 - n / span) + zigzag).view(H, self.head_size))

        self.receptance = nn.Linear(C, C, bias=False)
        self.key = nn.Linear(C, C, bias=False)
        self.value = nn.Linear(C, C, bias=False)
        self.gate = nn.Linear(C, C, bias=False)
        self.output = nn.Linear(C, C, bias=False)
        self.ln_x = nn.GroupNorm(H, C, eps=64e-5)  # RWKV's 1e-5 * head_size_divisor**2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        xx = F.pad(x, (0, 0, 1, -1)) - x  # previous token minus current (zero before t = 0)
        lora = torch.tanh((x + xx * self.time_maa_x) @ self.time_maa_w1)
        lora = torch.einsum("btsr,src->sbtc", lora.view(B, T, 5, -1), self.time_maa_w2)
        xw, xk, xv, xr, xg = (x + xx * (self.time_maa[:, None, None] + lora)).unbind(0)

        heads = (B, T, self.n_heads, self.head_size)
        r = self.receptance(xr).view(heads)
        k = self.key(xk).view(heads)
        v = self.value(xv).view(heads)
        g = F.silu(self.gate(xg))
        # Log-decay in float32: exp(-exp(.)) close to 1 is what long memory is made of.
        w = -torch.exp(self.time_decay + (torch.tanh(xw @ self.time_decay_w1) @ self.time_decay_w2).float())

        o = ops.rwkv6(r, k, v, w.view(heads), self.time_faaaa, backend=self.backend)
        o = self.ln_x(o.reshape(B * T, C)).view(B, T, C)
        return self.output(o * g)


class Mamba2Mixer(nn.Module):
    """Mamba2 mixer (mamba_ssm.modules.mamba2.Mamba2 without inference cache)."""

    def __init__(self, cfg: HybridConfig):
        super().__init__()
        self.d_inner, self.n_heads, self.headdim = cfg.mamba_d_inner, cfg.mamba_n_heads, cfg.mamba_headdim
        self.ngroups, self.d_state = cfg.mamba_ngroups, cfg.mamba_d_state
        self.chunk_size = cfg.mamba_chunk_size
        _, self.ssd_backend, self.conv_backend = cfg.op_backends
        conv_dim = self.d_inner + 2 * self.ngroups * self.d_state

        self.in_proj = nn.Linear(cfg.d_model, self.d_inner + conv_dim + self.n_heads, bias=False)
        # Only the weight [D, 1, W] and bias are used (by model.ops.causal_conv1d); nn.Conv1d gives
        # mamba_ssm's layout, names and default init.
        self.conv1d = nn.Conv1d(conv_dim, conv_dim, cfg.mamba_d_conv, groups=conv_dim, bias=True)

        dt_min, dt_max, dt_floor = 1e-3, 1e-1, 1e-4
        dt = torch.exp(torch.rand(self.n_heads) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))
        dt = dt.clamp(min=dt_floor)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # inverse softplus
        self.A_log = nn.Parameter(torch.log(torch.empty(self.n_heads).uniform_(1, 16)))
        self.D = nn.Parameter(torch.ones(self.n_heads))
        self.norm = RMSNorm(self.d_inner, group_size=self.d_inner // self.ngroups)
        self.out_proj = nn.Linear(self.d_inner, cfg.d_model, bias=False)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        B, T, _ = u.shape
        gn = self.ngroups * self.d_state
        z, xBC, dt = self.in_proj(u).split([self.d_inner, self.d_inner + 2 * gn, self.n_heads], dim=-1)
        xBC = ops.causal_conv1d(
            xBC, self.conv1d.weight.squeeze(1), self.conv1d.bias, activation="silu", backend=self.conv_backend
        )
        x, b, c = xBC.split([self.d_inner, gn, gn], dim=-1)
        dt = F.softplus(dt.float() + self.dt_bias)
        A = -torch.exp(self.A_log.float())
        y = ops.ssd(
            x.reshape(B, T, self.n_heads, self.headdim),
            dt,
            A,
            b.reshape(B, T, self.ngroups, self.d_state),
            c.reshape(B, T, self.ngroups, self.d_state),
            D=self.D,
            backend=self.ssd_backend,
            chunk_size=self.chunk_size,
        )
        return self.out_proj(self.norm(y.reshape(B, T, self.d_inner), gate=z))


class FeedForward(nn.Module):
    """Pre-norm GELU MLP; returns the residual update."""

    def __init__(self, cfg: HybridConfig):
        super().__init__()
        self.norm = RMSNorm(cfg.d_model)
        self.fc_in = nn.Linear(cfg.d_model, cfg.ffn_mult * cfg.d_model, bias=False)
        self.fc_out = nn.Linear(cfg.ffn_mult * cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc_out(F.gelu(self.fc_in(self.norm(x))))


class HybridBlock(nn.Module):
    def __init__(self, cfg: HybridConfig, layer_id: int):
        super().__init__()
        self.norm = RMSNorm(cfg.d_model)
        self.rwkv = RWKV6TimeMix(cfg, layer_id)
        self.mamba = Mamba2Mixer(cfg)
        self.rwkv_out_norm = RMSNorm(cfg.d_model)
        self.mamba_out_norm = RMSNorm(cfg.d_model)
        self.gain_rwkv = nn.Parameter(torch.full((cfg.d_model,), float(cfg.rwkv_gain_init)))
        self.gain_mamba = nn.Parameter(torch.full((cfg.d_model,), float(cfg.mamba_gain_init)))
        self.ffn = FeedForward(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        r = self.rwkv_out_norm(self.rwkv(h))
        m = self.mamba_out_norm(self.mamba(h))
        x = x + self.gain_rwkv * r + self.gain_mamba * m
        return x + self.ffn(x)


class HybridLM(nn.Module):
    def __init__(self, cfg: HybridConfig):
        super().__init__()
        self.config = cfg
        ops.preload(dict(zip(OPS, cfg.op_backends, strict=True)))
        self.embedding = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList([HybridBlock(cfg, i) for i in range(cfg.n_layers)])
        self.norm_out = RMSNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
        for block in self.block_list():
            nn.init.normal_(block.ffn.fc_out.weight, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layers))

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """idx, targets: [B, T] token ids -> (logits [B, T, V], float32 cross-entropy or None).
        Targets of -1 are ignored."""
        x = self.embedding(idx)
        checkpointing = self.config.activation_checkpointing and self.training and torch.is_grad_enabled()
        for block in self.blocks:
            if checkpointing:
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        logits = self.lm_head(self.norm_out(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=-1)
        return logits, loss

    @contextlib.contextmanager
    def using_kernels(self, kernels: str) -> Iterator[None]:
        """Runs the mixers' ops through another kernels choice for the duration, then restores them.

        Evaluation uses the reference ("torch"): a val loss is then a function of the weights alone, the
        same for a run trained with the fused kernels as for its torch twin, and an fp32 eval pays no
        Triton autotuning of its own (a fused fp32 eval re-tuned every kernel for fp32, once per process).
        """
        if kernels not in KERNELS:
            raise ValueError(f"kernels must be one of {', '.join(KERNELS)}, got {kernels!r}")
        rwkv, ssd, conv = OP_BACKENDS[kernels]
        saved = [(b.rwkv.backend, b.mamba.ssd_backend, b.mamba.conv_backend) for b in self.block_list()]
        for b in self.block_list():
            b.rwkv.backend, b.mamba.ssd_backend, b.mamba.conv_backend = rwkv, ssd, conv
        try:
            yield
        finally:
            for b, (r, s, c) in zip(self.block_list(), saved):
                b.rwkv.backend, b.mamba.ssd_backend, b.mamba.conv_backend = r, s, c

    def block_list(self) -> list[HybridBlock]:
        """The blocks, typed as what they are (an nn.ModuleList's items are typed nn.Module)."""
        return cast("list[HybridBlock]", list(self.blocks))

    def no_weight_decay(self) -> set[str]:
        """Names of parameters with ndim >= 2 that are not weight matrices (RWKV's per-channel mixes and
        bonus); everything 1-D is already excluded by the training loop's ndim rule."""
        return {name for name, _ in self.named_parameters() if name.rsplit(".", 1)[-1] in _NO_DECAY_2D}

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def summary(self) -> str:
        """Parameter count per component, one per line."""
        n = self.config.n_layers

        def count(modules) -> int:
            return sum(p.numel() for m in modules for p in m.parameters())

        blocks = self.block_list()
        block_norms_and_gains = sum(
            b.norm.weight.numel() + b.rwkv_out_norm.weight.numel() + b.mamba_out_norm.weight.numel()
            + b.gain_rwkv.numel() + b.gain_mamba.numel()
            for b in blocks
        )  # fmt: skip
        rows = [
            ("embedding", count([self.embedding])),
            (f"rwkv6 time-mix  x{n}", count(b.rwkv for b in blocks)),
            (f"mamba2 mixer    x{n}", count(b.mamba for b in blocks)),
            (f"feed-forward    x{n}", count(b.ffn for b in blocks)),
            (f"norms + gains   x{n}", block_norms_and_gains),
            ("final norm", count([self.norm_out])),
            ("lm_head", count([self.lm_head])),
        ]
        total = self.num_params()
        assert sum(c for _, c in rows) == total, "summary misses a component"
        cfg = self.config
        lines = [
            f"HybridLM  d_model={cfg.d_model} n_layers={n} vocab={cfg.vocab_size} kernels={cfg.kernels}",
            *(f"  {name:<22}{c:>12,}  {100 * c / total:5.1f}%" for name, c in rows),
            f"  {'total':<22}{total:>12,}",
        ]
        return "\n".join(lines)


_NO_DECAY_2D = {"time_maa", "time_faaaa"}
