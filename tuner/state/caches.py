"""The compile caches a search keeps across searches: where they are, how big they grew, and clearing them.

    python -m tuner.state.caches                      each key's size, files, last use and what it stands for
    python -m tuner.state.caches --clear KEY          remove one key's caches (a name from the listing)
    python -m tuner.state.caches --clear              remove every key's caches
    python -m tuner.state.caches --cache-dir DIR ...  another root (a search's --cache-dir or search.cache_dir)

A root holds one subdir per cache key (trainables/training/compile_cache.py:CacheKey): a GPU (name and compute
capability) or the CPU, and the versions of torch, Triton, the fused kernels and Python. A key left behind
by an upgrade or another GPU is never read again: clear it. Clearing costs the next search a cold compile
(and, for fused kernels without shipped results, their autotune); clear no key a search is using.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from trainables.common.cli import OneLineParser
from trainables.common.errors import first_line
from trainables.common.exit_codes import Exit
from trainables.config import ConfigError
from trainables.training.compile_cache import KEY_FILE, ROOTS, CacheKey, default_root

ALL = "all keys"  # --clear without a key


@dataclass(frozen=True)
class KeyUsage:
    """One key's caches in a root: its size and what it stands for (None: no key.json, e.g. half-written)."""

    name: str
    size: int  # bytes
    files: int
    last_used: float | None  # the newest file's mtime
    stands_for: dict | None

    def describe(self) -> str:
        if not self.stands_for:
            return "unknown (no key.json)"
        versions = self.stands_for.get("versions", {})
        sw = ", ".join(f"{dist} {v}" for dist, v in versions.items() if v)
        return f"{self.stands_for.get('device')}; python {self.stands_for.get('python')}; {sw}"


def resolve_root(asked: str | None, what: str = "--cache-dir") -> Path:
    """The cache root a search uses (`asked`, else the user's cache dir), made if missing; ConfigError
    naming `what` when it cannot be written."""
    root = Path(asked).expanduser().resolve() if asked else default_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
        writable = os.access(root, os.W_OK)
    except OSError as err:
        raise ConfigError(f"{what}: {root} cannot be made ({err.strerror or first_line(err)})") from None
    if not writable:
        raise ConfigError(f"{what}: {root} is not writable (pass a folder of yours)")
    return root


def is_key_dir(path: Path) -> bool:
    """A key's dir: what a run made (key.json, or a cache dir in it). Anything else in a root is left alone."""
    return path.is_dir() and ((path / KEY_FILE).exists() or any((path / name).is_dir() for name in ROOTS))


def key_usage(path: Path) -> KeyUsage:
    size = files = 0
    newest: float | None = None
    for dirpath, _dirs, names in os.walk(path):
        for name in names:
            try:
                st = (Path(dirpath) / name).stat()
            except OSError:  # removed meanwhile
                continue
            size, files = size + st.st_size, files + 1
            newest = st.st_mtime if newest is None else max(newest, st.st_mtime)
    try:
        stands_for = json.loads((path / KEY_FILE).read_text())
    except (OSError, ValueError):
        stands_for = None
    return KeyUsage(path.name, size, files, newest, stands_for)


def usage(root: Path) -> list[KeyUsage]:
    """Each key's caches in `root`, largest first."""
    if not root.is_dir():
        return []
    keys = [key_usage(p) for p in sorted(root.iterdir()) if is_key_dir(p)]
    return sorted(keys, key=lambda k: -k.size)


def human(size: int) -> str:
    if size < 1024:
        return f"{size} B"
    for unit, scale in (("KB", 1 << 10), ("MB", 1 << 20)):
        if size < 1024 * scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size / (1 << 30):.1f} GB"


def counted(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


def start_line(root: Path) -> str:
    """The search's one line on its caches, at its start."""
    keys = usage(root)
    if not keys:
        held = "empty: this search compiles cold and keeps what it compiles for the next"
    else:
        held = f"{human(sum(k.size for k in keys))} in {counted(len(keys), 'key')}"
    return f"compile cache: {root} ({held}; python -m tuner.state.caches lists and clears it)"


def clear(root: Path, key: str) -> list[str]:
    """Removes `key`'s dir (ALL: every key's); returns the names removed. ConfigError for an unknown key."""
    names = [k.name for k in usage(root)]
    if key != ALL and key not in names:
        known = ", ".join(names) or "none"
        raise ConfigError(f"--clear: no key {key!r} in {root} (its keys: {known})")
    chosen = names if key == ALL else [key]
    for name in chosen:
        shutil.rmtree(root / name)
    return chosen


def listing(root: Path, here: CacheKey | None) -> list[str]:
    keys = usage(root)
    if not keys:
        return [f"{root}: no compile caches yet"]
    lines = [f"{root}: {human(sum(k.size for k in keys))} in {counted(len(keys), 'key')}"]
    for k in keys:
        used = time.strftime("%Y-%m-%d %H:%M", time.localtime(k.last_used)) if k.last_used else "never"
        mine = " (this machine)" if here and k.name == here.name else ""
        lines.append(f"  {k.name}{mine}: {human(k.size)}, {k.files} files, last used {used}")
        lines.append(f"      {k.describe()}")
    return lines


def build_parser() -> OneLineParser:
    p = OneLineParser(
        prog="python -m tuner.state.caches",
        description=__doc__.split("\n\n", 1)[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--cache-dir", metavar="DIR", help=f"the cache root (default: {default_root()})")
    p.add_argument(
        "--clear",
        nargs="?",
        const=ALL,
        metavar="KEY",
        help="remove a key's caches (a name the listing shows), or every key's without KEY",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        root = Path(args.cache_dir).expanduser().resolve() if args.cache_dir else default_root()
        if args.clear:
            removed = clear(root, args.clear)
            print(
                f"cleared {counted(len(removed), 'key')} from {root}: {', '.join(removed) or 'none were there'}"
            )
            return Exit.OK
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return Exit.BAD_INPUT
    except OSError as err:
        print(f"error: {root}: {err.strerror or first_line(err)}", file=sys.stderr)
        return Exit.FAILED
    print("\n".join(listing(root, CacheKey.here())))
    return Exit.OK


if __name__ == "__main__":
    sys.exit(main())
