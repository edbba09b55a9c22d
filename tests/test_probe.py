"""The batch-size probe against a real out-of-memory: the CPU allocator under an address-space cap.

Like the search (a fresh Ray worker per probe), each probe runs in its own process: an allocation that
fails inside a native library (oneDNN) can leave the process that saw it unable to train again.
"""

import json
import subprocess
import sys
from pathlib import Path

from trainables.config import read_yaml, training_section

ROOT = Path(__file__).resolve().parents[1]
SHAKESPEARE = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"


def smoke_base(**extra) -> dict:
    base = training_section(read_yaml(ROOT / "configs" / "smoke.yaml"))
    return {**base, "data": str(SHAKESPEARE) if SHAKESPEARE.exists() else None, **extra}


def probe(limit: int, **extra) -> int:
    base = smoke_base(**extra)
    code = (
        "import json, sys; from tuner.space.batch_finder import max_batch; "
        f"print(max_batch(json.loads(sys.argv[1]), 'fp32', limit={limit}).model_dump_json())"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, json.dumps(base)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["peak_mb"] > 0  # the step's peak (RSS on a CPU), what a run's GPU share is sized from
    return found["batch"]


def test_probe_finds_the_largest_batch_under_a_memory_cap():
    bound = probe(4096, memory_cap_mb=300)
    # The smoke model at 2048 sequences needs far more than 300 MB (tests/test_train.py's OOM case);
    # batch 16 trains in the same cap.
    assert 16 <= bound < 2048


def test_probe_without_a_cap_reaches_the_limit():
    """In this process: with no cap nothing runs out of memory, so no process is left unable to train (a
    subprocess's imports were most of this test)."""
    from tuner.space.batch_finder import max_batch

    found = max_batch(smoke_base(), "fp32", limit=8)
    assert found.peak_mb > 0  # the step's peak (RSS on a CPU), what a run's GPU share is sized from
    assert found.batch == 8  # everything up to the limit fits: the limit itself, no safety margin taken off
