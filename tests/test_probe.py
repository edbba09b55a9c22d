"""The batch-size probe against a real out-of-memory: the CPU allocator under an address-space cap."""

from pathlib import Path

from trainables.config import read_yaml, training_section
from tuner.probe import max_batch

ROOT = Path(__file__).resolve().parents[1]
SHAKESPEARE = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"


def smoke_base(**extra):
    base = training_section(read_yaml(ROOT / "configs" / "smoke.yaml"))
    return {**base, "data": str(SHAKESPEARE) if SHAKESPEARE.exists() else None, **extra}


def test_probe_finds_the_largest_batch_under_a_memory_cap():
    bound = max_batch(smoke_base(memory_cap_mb=300), "fp32", limit=4096)
    # The smoke model at 2048 sequences needs far more than 300 MB (tests/test_train.py's OOM case);
    # batch 16 trains in the same cap.
    assert 16 <= bound < 2048
    # Under the limit everything fits: the limit itself, with no safety margin taken off.
    assert max_batch(smoke_base(), "fp32", limit=8) == 8
