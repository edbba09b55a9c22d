"""Whether a run's torch.compile found its graphs in the compile cache.

Inductor counts, per process, each compiled graph (a training step has a forward and a backward one) that
its FX graph cache answered (hit), had to compile (miss), or could not cache (bypass). Counted over one run,
they say whether its warm-up was a cold compile or a cached one: a search shares one cache between its
trials, and a run that misses it pays minutes (two minutes for batch 32 bf16 under CUDA graphs on an H200)
where a hit pays seconds. Counters read through torch's own `counters`; no compile, no outcome.

`stable_cache_keys` makes the keys themselves the same in every process, so one run's graphs can be another's hits.
"""

from __future__ import annotations

from collections import Counter
from typing import Literal

CacheUse = Literal["hit", "miss", "partial"]
# Inductor's counter names: a bypass compiles every time, as a miss does.
_KIND = {"fxgraph_cache_hit": "hit", "fxgraph_cache_miss": "miss", "fxgraph_cache_bypass": "miss"}


def _read() -> Counter:
    # Imported on use: tuner/state/records.py takes CacheUse from here, and the search's driver need not load Dynamo.
    from torch._dynamo.utils import counters

    out: Counter = Counter()
    for name, kind in _KIND.items():
        out[kind] += counters["inductor"][name]
    return out


class CacheCount:
    """Reads the counters at the start of a run; `outcome()` says what the run's compiles found since."""

    def __init__(self) -> None:
        self.before = _read()

    def outcome(self) -> CacheUse | None:
        since = _read() - self.before
        return classify(since["hit"], since["miss"])


def classify(hits: int, misses: int) -> CacheUse | None:
    """All graphs from the cache, none, or some; None when nothing was compiled."""
    if hits <= 0 and misses <= 0:
        return None
    if misses <= 0:
        return "hit"
    return "miss" if hits <= 0 else "partial"


def stable_cache_keys() -> None:
    """Key a graph the same in every process. Inductor's cache key pickles each input's metadata, and
    pickle writes a `torch.memory_format` as a global looked up by name in the first module of sys.modules
    through which `torch.contiguous_format` resolves: that depends on what the process imported first. So
    a search's loss-check trials (Ray workers that import in another order) missed every graph its screen
    had compiled, on every GPU search recorded (docs/benchmarks.md). Pickled through a function of
    ours, the format writes the same bytes everywhere. Call before the first compile. Process-wide: a pickle
    holding a memory format then needs this package to load; only cache keys hold one here."""
    import copyreg

    import torch

    copyreg.pickle(torch.memory_format, _reduce_memory_format)


def _reduce_memory_format(fmt) -> tuple:
    return _memory_format, (str(fmt).removeprefix("torch."),)


def _memory_format(name: str):
    import torch

    return getattr(torch, name)
