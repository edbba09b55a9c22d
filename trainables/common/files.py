"""Files that other processes may read while one is written: the compile cache's entries, OUT's state, the
remembered answers, the downloaded corpus's cache (trainables/data/__init__.py); and the folder those caches live in
(corpus_cache_dir)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path


def write_atomically(dest: Path, data: bytes | str) -> None:
    """`data` (str as UTF-8) into `dest`, whole or not at all: written beside it under a name of this writer's
    own (processes and threads each their own), then renamed over it, so a reader never sees half a file and
    two writers never write into one temp file. A failed write leaves `dest` as it was and no temp file."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex[:12]}.tmp")  # dot-named: cache listings skip it
    try:
        with open(tmp, "xb") as out:
            out.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def corpus_cache_dir() -> Path:
    if os.environ.get("TUNER_CACHE_DIR"):
        return Path(os.environ["TUNER_CACHE_DIR"])
    try:
        import platformdirs  # here, not at the top: the GPU machine's kernel bundle lacks it
    except ImportError:
        return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hybrid-tuner"
    return Path(platformdirs.user_cache_dir("hybrid-tuner"))
