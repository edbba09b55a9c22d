"""`python -m tuner.report OUT`: rebuild OUT/report.md and OUT/report.html from OUT/summary.json."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pydantic import ValidationError

from trainables.common.cli import OneLineParser
from tuner.report import write_reports
from tuner.state.records import Summary


def _load(path: Path) -> Summary:
    """The saved summary; OSError, ValueError or ValidationError (with one line to say) if it is not one."""
    return Summary.model_validate(json.loads(path.read_text()))


def _problem(path: Path, err: Exception) -> str:
    if isinstance(err, OSError):
        return f"cannot read {path}: {err.strerror or err}"
    if isinstance(err, ValidationError):
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the top level"
        return f"{path} is not a summary ({err.error_count()} problem(s)); {where}: {first['msg']}"
    return f"{path} is not valid JSON: {err}"  # JSONDecodeError, UnicodeDecodeError


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(
        prog="python -m tuner.report",
        description="Rebuild report.md and report.html from OUT/summary.json without rerunning the search.",
    )
    parser.add_argument("out", help="the search's output directory (holds summary.json)")
    args = parser.parse_args(argv)
    path = Path(args.out) / "summary.json"
    try:
        summary = _load(path)
    except (OSError, ValueError) as err:  # pydantic's ValidationError is a ValueError
        print(f"error: {_problem(path, err)}", file=sys.stderr)
        return 2
    for written in write_reports(args.out, summary):
        print(written)
    return 0


if __name__ == "__main__":
    sys.exit(main())
