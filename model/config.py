"""The hybrid's settings (HybridConfig) and its kernels choices, without torch: the search's config checks
and every process that never builds a model import this, not model.hybrid."""

from __future__ import annotations

import dataclasses
import math

KERNELS = ("torch", "fused", "auto", "naive")

OPS = ("rwkv6", "ssd", "causal_conv1d")  # the ops a kernels choice picks a backend for, in this order
# kernels choice -> backend per op (OPS).
OP_BACKENDS = {
    "torch": ("torch", "torch", "torch"),
    "fused": ("fla", "mamba_ssm", "mamba_ssm"),
    "auto": ("auto", "auto", "auto"),
    "naive": ("naive", "naive", "naive"),
}


@dataclasses.dataclass(kw_only=True)
class HybridConfig:
    vocab_size: int = 65  # set from the tokenizer
    d_model: int = 128
    n_layers: int = 8
    seq_len: int = 256  # training context; the model itself is recurrent and has no position limit
    rwkv_n_heads: int = 4
    rwkv_mix_lora_rank: int = 32  # ddlerp LoRA (token-shift interpolation for w, k, v, r, g)
    rwkv_decay_lora_rank: int = 64
    mamba_d_state: int = 64
    mamba_headdim: int = 32
    mamba_expand: int = 2
    mamba_d_conv: int = 4
    mamba_ngroups: int = 1
    mamba_chunk_size: int = 64
    ffn_mult: int = 4
    rwkv_gain_init: float = 0.7
    mamba_gain_init: float = 0.3
    kernels: str = "torch"  # "torch" | "fused" (fla + mamba_ssm) | "auto" | "naive"
    activation_checkpointing: bool = False

    def __post_init__(self):
        int_fields = [f.name for f in dataclasses.fields(self) if f.type in (int, "int")]  # all are sizes
        for name in int_fields:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        for name in ("rwkv_gain_init", "mamba_gain_init"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {value!r}")
        if self.kernels not in KERNELS:
            raise ValueError(f"kernels must be one of {', '.join(KERNELS)}, got {self.kernels!r}")
        if not isinstance(self.activation_checkpointing, bool):
            value = self.activation_checkpointing
            raise ValueError(f"activation_checkpointing must be a bool, got {value!r}")
        if self.d_model % self.rwkv_n_heads:
            raise ValueError(f"rwkv_n_heads ({self.rwkv_n_heads}) must divide d_model ({self.d_model})")
        d_inner, n_heads = self.mamba_d_inner, self.mamba_n_heads
        if d_inner % self.mamba_headdim:
            raise ValueError(f"mamba_headdim ({self.mamba_headdim}) must divide d_inner ({d_inner})")
        if n_heads % self.mamba_ngroups:
            raise ValueError(f"mamba_ngroups ({self.mamba_ngroups}) must divide Mamba2's {n_heads} heads")

    @property
    def mamba_d_inner(self) -> int:
        return self.mamba_expand * self.d_model

    @property
    def mamba_n_heads(self) -> int:
        return self.mamba_d_inner // self.mamba_headdim

    def flops_per_token(self) -> float:
        """Training FLOPs per token (forward + backward = 3 x forward), for MFU. Counts, per block, the
        matmuls (each weight [m, n] applied to a token: 2mn FLOPs) and the mixers' state updates in their
        recurrent form (RWKV6: S = w S + k^T v and r S per head, 4 x head_size^2; Mamba2's SSD: the same
        with a [headdim, d_state] state, 4 x headdim x d_state per head), plus lm_head. Left out: the
        embedding (a gather), norms, activations, the depthwise conv, the token shift and gates
        (elementwise), and the chunked kernels' extra intra-chunk work (a kernel's cost, not the model's)."""
        C, r_mix, r_decay = self.d_model, self.rwkv_mix_lora_rank, self.rwkv_decay_lora_rank
        d_inner, gn = self.mamba_d_inner, self.mamba_ngroups * self.mamba_d_state
        rwkv_weights = 5 * C * C + 2 * 5 * C * r_mix + 2 * C * r_decay  # r k v g output; ddlerp, decay LoRAs
        rwkv_state = 4 * C * (C // self.rwkv_n_heads)  # n_heads x 4 x head_size^2
        mamba_weights = C * (2 * d_inner + 2 * gn + self.mamba_n_heads) + d_inner * C  # in_proj, out_proj
        mamba_state = 4 * d_inner * self.mamba_d_state  # n_heads x 4 x headdim x d_state
        ffn_weights = 2 * self.ffn_mult * C * C
        block = 2 * (rwkv_weights + mamba_weights + ffn_weights) + rwkv_state + mamba_state
        forward = self.n_layers * block + 2 * C * self.vocab_size
        return 3.0 * forward

    @property
    def op_backends(self) -> tuple[str, str, str]:
        """Backends for OPS (rwkv6, ssd, causal_conv1d)."""
        return OP_BACKENDS[self.kernels]
