"""The hybrid RWKV6 + Mamba2 LM (model.hybrid) and its sequence-mixing ops (model.ops).

The names below load model.hybrid (and torch) on first use, not on `import model`: every process that
imports the project (the reaper, Ray's gate and telemetry actors, a CLI refusing bad input) imports this
package through trainables/__init__.py, and most of them never build a model.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the type checker reads; at run time __getattr__ below loads them on first use
    from model.config import KERNELS, HybridConfig
    from model.hybrid import HybridBlock, HybridLM, Mamba2Mixer, RMSNorm, RWKV6TimeMix

__all__ = ["KERNELS", "HybridBlock", "HybridConfig", "HybridLM", "Mamba2Mixer", "RMSNorm", "RWKV6TimeMix"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        home = "model.config" if name in ("HybridConfig", "KERNELS") else "model.hybrid"
        return getattr(importlib.import_module(home), name)
    raise AttributeError(f"module 'model' has no attribute {name!r}")
