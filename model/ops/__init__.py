"""Sequence-mixing ops of the hybrid LM, each with one signature across backends.

Layout follows flash-linear-attention: ``[B, T, H, K]``. ``backend`` picks the implementation:
"naive" (step-by-step recurrence, the written definition), "torch" (chunked pure PyTorch, computed in
float32 or wider), a fused kernel ("fla" for rwkv6, "mamba_ssm" for ssd / causal conv), or "auto" (the
fused kernel when it is importable and the tensors are on CUDA, else "torch"). Fused modules are imported
on first use; ``available_backends()`` says which can run here.
"""

from model.ops._backend import available_backends, preload
from model.ops.conv import causal_conv1d
from model.ops.rwkv6 import rwkv6
from model.ops.ssd import ssd

__all__ = ["available_backends", "causal_conv1d", "preload", "rwkv6", "ssd"]
