"""Files of ../shared, the workspace folder beside a checkout (the seed's corpus, a recorded search's case, the
KubeRay CRDs): a clone has none, so a test that reads one skips there; where ../shared is there CI sets
TUNER_REQUIRE_SHARED=1 (.ci/run), and a missing file fails the test instead of skipping it, as the browser's
and Prometheus' tests fail when CI requires them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"
REQUIRED = "TUNER_REQUIRE_SHARED"


def shared_file(*parts: str) -> Path:
    """../shared/<parts>, or a skip (a failure under TUNER_REQUIRE_SHARED=1) where it is not there."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        reason = f"../shared/{'/'.join(parts)} is not beside this checkout (a clone has no ../shared)"
        if os.environ.get(REQUIRED) == "1":
            pytest.fail(f"{REQUIRED}=1: {reason}")
        pytest.skip(reason)
    return path
