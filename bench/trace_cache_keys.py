"""Which runs missed the FX graph cache, and why: reads the structured traces torch writes with
TORCH_TRACE=DIR (one file per process; a search's trials inherit the variable from the driver).

    TORCH_TRACE=/tmp/trace python -m tuner.search ...          # then:
    python bench/trace_cache_keys.py /tmp/trace [--summary OUT/summary.json]
        per process: pid, the search trial it ran (with --summary), FX graph cache hits / misses and keys
    python bench/trace_cache_keys.py /tmp/trace --diff KEY_A KEY_B
        the key components (hashed fields) in which two cache keys (whole, or the 10 characters printed
        above) differ, and how many of them print the same: why one missed the other's entry
    python bench/trace_cache_keys.py /tmp/trace --dump keys.json
        the same facts in a small file (the traces are tens of MB a process); KEYS.json then stands for
        the trace folder in both commands above
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path

EVENT = re.compile(r'"name": "fx_graph_cache_(hit|miss|bypass)"')
KEY = re.compile(r'"key": "(\w+)",\s*"components": \[(.*?)\n\s*\]', re.S)
PID = re.compile(r"^[VIWE]\d{4} [\d:.]+ (\d+) ", re.M)


def read(path: Path) -> dict:
    text = path.read_text(errors="replace")
    pid = PID.search(text)
    keys = {m.group(1): re.findall(r'^\s*"(\[.*)",?$', m.group(2), re.M) for m in KEY.finditer(text)}
    return {"pid": int(pid.group(1)) if pid else None, "events": Counter(EVENT.findall(text)), "keys": keys}


def trials_by_pid(summary: Path | None) -> dict[int, str]:
    if summary is None:
        return {}
    trials = json.loads(summary.read_text())["trials"]
    return {t["pid"]: t["id"] for t in trials if t.get("pid") is not None}


def fields(components: list[str]) -> dict[str, tuple[str, str]]:
    """A key's components, "[hash] field: value", as field -> (hash, printed value)."""
    out = {}
    for line in components:
        head, _, value = line.partition(": ")
        digest, _, field = head.partition("] ")
        out[field] = (digest.lstrip("["), value)
    return out


def diff_keys(a: list[str], b: list[str]) -> list[str]:
    """The fields in which two keys differ, one line each, and a count of those whose printed values are
    equal: torch prints a tensor input as its metadata but may hash more (a constant's values)."""
    fa, fb = fields(a), fields(b)
    differ = [f for f in sorted(fa.keys() | fb.keys()) if fa.get(f, ("", ""))[0] != fb.get(f, ("", ""))[0]]
    same_text = [f for f in differ if f in fa and f in fb and fa[f][1] == fb[f][1]]
    lines = [
        f"{len(differ)} of {len(fa.keys() | fb.keys())} fields differ; {len(same_text)} of them print the same"
    ]
    for f in differ:
        va, vb = fa.get(f, ("-", "(absent)")), fb.get(f, ("-", "(absent)"))
        note = "same text" if f in same_text else f"{va[1][:120]!r} vs {vb[1][:120]!r}"
        lines.append(f"{f}: {va[0][:10]} vs {vb[0][:10]}, {note}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--summary", type=Path)
    parser.add_argument("--diff", nargs=2, metavar="KEY")
    parser.add_argument("--dump", type=Path, help="write what the traces say to this JSON file")
    args = parser.parse_args()
    if not args.trace.is_file() and not any(args.trace.glob("*.log")):
        parser.exit(2, f"error: {args.trace} is neither a --dump file nor a folder of TORCH_TRACE logs\n")
    if args.trace.is_file():
        processes = json.loads(args.trace.read_text())
    else:
        processes = [read(p) for p in sorted(args.trace.glob("*.log"))]
    if args.dump:
        args.dump.write_text(json.dumps(processes))
    if args.diff:
        found = {k: c for p in processes for k, c in p["keys"].items()}
        keys = [next((k for k in found if k.startswith(prefix)), None) for prefix in args.diff]
        if None in keys:
            parser.exit(2, f"error: no key starts with {args.diff[keys.index(None)]}\n")
        for line in diff_keys(found[keys[0]], found[keys[1]]):
            print(line)
        return
    trial = trials_by_pid(args.summary)
    for p in processes:
        if p["events"]:
            keys = " ".join(k[:10] for k in p["keys"])
            print(f"pid {p['pid']} {trial.get(p['pid'], '?'):>16} {dict(p['events'])} keys: {keys}")


if __name__ == "__main__":
    main()
