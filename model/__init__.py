"""The hybrid RWKV6 + Mamba2 LM (model.hybrid) and its sequence-mixing ops (model.ops)."""

from model.hybrid import KERNELS, HybridBlock, HybridConfig, HybridLM, Mamba2Mixer, RMSNorm, RWKV6TimeMix

__all__ = ["KERNELS", "HybridBlock", "HybridConfig", "HybridLM", "Mamba2Mixer", "RMSNorm", "RWKV6TimeMix"]
