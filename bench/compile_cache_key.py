"""Why does a run miss the compile cache another run filled? One training run, fresh process, with the
Inductor / AOTAutograd cache counters and the caches' per-field key hashes written out.

    export TORCHINDUCTOR_CACHE_DIR=/tmp/cc/inductor TRITON_CACHE_DIR=/tmp/cc/triton
    python bench/compile_cache_key.py --tag a --config configs/default.yaml --set max_steps=20 ...
    python bench/compile_cache_key.py --tag b --config configs/default.yaml --set max_steps=20 \
        --set gpu_memory_fraction=0.25 ...
    diff <(grep '^\\[' keys/a.log) <(grep '^\\[' keys/b.log)   # the fields whose hash differs

Prints one JSON line: the tag, compile_s, warmup_s and the cache hit/miss counters.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from trainables.config import load_config
from trainables.training.loop import resolve_device, train
from trainables.workloads.workload import load_workload

KEY_LOGGERS = ("torch._inductor.codecache", "torch._functorch._aot_autograd.autograd_cache")


def _log_keys(path: Path) -> None:
    """The caches log each key's per-field hashes at DEBUG: keep them in `path`, nothing else."""
    handler = logging.FileHandler(path, mode="w")
    handler.setLevel(logging.DEBUG)
    for name in KEY_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(logging.DEBUG)
        logger.addHandler(handler)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tag", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--data")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--keys", default="keys", help="folder for <tag>.log")
    args = parser.parse_args()
    Path(args.keys).mkdir(parents=True, exist_ok=True)
    _log_keys(Path(args.keys) / f"{args.tag}.log")
    cfg = load_config(args.config, args.overrides, data=args.data)
    resolve_device(cfg)
    result = train(cfg, workload=load_workload(cfg))
    from torch._dynamo.utils import counters

    cache = {k: dict(v) for k, v in counters.items() if k in ("inductor", "aot_autograd")}
    cache = {k: {n: c for n, c in v.items() if "cache" in n} for k, v in cache.items()}
    keep = ("status", "compile_s", "warmup_s", "tokens_per_s", "error")
    print(json.dumps({"tag": args.tag, **{k: getattr(result, k) for k in keep}, "counters": cache}))


if __name__ == "__main__":
    main()
