"""Inductor's cache keys must not depend on what a process imported first (trainables/training/cache_use.py:
stable_cache_keys): a search's loss-check trials missed every graph its screen had compiled because of it."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import torch

from trainables.training.cache_use import stable_cache_keys

ROOT = Path(__file__).resolve().parents[1]

# One input's part of an FX graph cache key, as Inductor computes it, in a Ray driver (a script that
# imported torch itself) and in a Ray worker (which imported Ray's modules first): first as torch pickles
# it, then after stable_cache_keys().
KEYS_HERE_AND_IN_A_WORKER = f"""
import json, sys
sys.path.insert(0, {str(ROOT)!r})
import ray, torch


def key(stable):
    from torch._inductor.codecache import FxGraphCachePickler, extract_tensor_metadata_for_cache_key
    if stable:
        from trainables.training.cache_use import stable_cache_keys
        stable_cache_keys()
    meta = extract_tensor_metadata_for_cache_key(torch.empty(65, 128))
    return FxGraphCachePickler(torch.fx.symbolic_trace(torch.nn.Identity())).get_hash(meta)


ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
in_worker = ray.remote(key)
keys = {{"driver": key(False), "worker": ray.get(in_worker.remote(False))}}
keys.update({{"driver_stable": key(True), "worker_stable": ray.get(in_worker.remote(True))}})
ray.shutdown()
print(json.dumps(keys))
"""


def test_a_graph_keys_the_same_in_a_ray_worker_as_in_its_driver(tmp_path):
    script = tmp_path / "keys.py"
    script.write_text(KEYS_HERE_AND_IN_A_WORKER)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=240, env=os.environ.copy()
    )
    assert done.returncode == 0, done.stderr[-2000:]
    keys = json.loads(done.stdout.strip().splitlines()[-1])
    # The problem, reproduced: the same tensor metadata keys differently in the two processes.
    assert keys["driver"] != keys["worker"]
    # The fix: one key in both.
    assert keys["driver_stable"] == keys["worker_stable"]


def test_memory_formats_still_unpickle_to_themselves():
    stable_cache_keys()
    for fmt in (torch.contiguous_format, torch.channels_last, torch.preserve_format):
        assert pickle.loads(pickle.dumps(fmt)) is fmt
