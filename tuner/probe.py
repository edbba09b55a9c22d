"""Largest batch that fits, per precision: doubling until OOM, then bisecting (as Lightning's finder does)."""

from __future__ import annotations

from typing import Any

from trainables.config import make_config
from trainables.data import Corpus, shipped_corpus
from trainables.loop import train


def _fits(base: dict[str, Any], batch: int, precision: str) -> bool:
    cfg = make_config(
        {
            **base,
            "batch_size": batch,
            "precision": precision,
            "max_steps": 2,
            "timing_warmup_steps": 1,
            "log_interval": 1,
            "eval_interval": 0,
            "eval_batch_size": 1,
            "eval_tokens": base.get("seq_len", 256),
            "out_dir": None,
        }
    )
    result = train(cfg, log=None)
    if result["status"] not in ("ok", "oom"):
        raise RuntimeError(f"batch probe at {batch} ({precision}) failed: {result['error']}")
    return result["status"] == "ok"


def max_batch(
    base: dict[str, Any],
    precision: str,
    limit: int,
    margin: float = 0.9,
    bisect_steps: int = 3,
    corpus: Corpus | None = None,
) -> int:
    """Largest batch <= limit that trains a step at `precision`, times a safety margin; 0 if none fits.
    `corpus`: the driver's, shipped through Ray, so the probe's node needs no copy of its own."""
    with shipped_corpus(corpus):
        return _max_batch(base, precision, limit, margin, bisect_steps)


def _max_batch(base: dict[str, Any], precision: str, limit: int, margin: float, bisect_steps: int) -> int:
    low = 1
    if not _fits(base, low, precision):
        return 0
    high = None  # smallest size seen to fail
    while low * 2 <= limit:
        if _fits(base, low * 2, precision):
            low *= 2
        else:
            high = low * 2
            break
    if high is None:
        return low  # everything up to the limit fits: no margin needed
    for _ in range(bisect_steps):
        mid = (low + high) // 2
        if mid in (low, high):
            break
        if _fits(base, mid, precision):
            low = mid
        else:
            high = mid
    return max(1, int(low * margin))
