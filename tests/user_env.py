"""The environment a user's shell would hand the searches and CLIs the tests start. Torch writes
TORCHINDUCTOR_CACHE_DIR (its default, /tmp/torchinductor_<user>) into os.environ the first time it asks for its
cache dir, as importing Dynamo does; a child handed that copy takes it for the user's own export and keeps an
unkeyed cache (issue 56 item 1). This module is imported by tests/conftest.py before torch, so it knows what
the user exported; a test that sets the variable itself (monkeypatch) keeps it."""

from __future__ import annotations

import os
import tempfile

_TORCH_SETS = "TORCHINDUCTOR_CACHE_DIR"
_EXPORTED = os.environ.get(_TORCH_SETS)


def _torch_default(path: str) -> bool:
    """Whether path is Inductor's default cache dir (cache_dir_utils.default_cache_dir): torchinductor_<user>
    in the temp dir."""
    return os.path.dirname(path) == tempfile.gettempdir() and os.path.basename(path).startswith(
        "torchinductor_"
    )


def user_env() -> dict[str, str]:
    """os.environ as it is now, less the cache dir torch wrote into it (never one the user or a test set)."""
    env = dict(os.environ)
    if _EXPORTED is None and _torch_default(env.get(_TORCH_SETS, "")):
        del env[_TORCH_SETS]
    return env
