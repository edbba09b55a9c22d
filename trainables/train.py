"""`python -m trainables.train --config PATH [--set key=value ...] [--data PATH] [--json]`.

Progress goes to stderr; with --json the last stdout line is one JSON object with the run's metrics.
Exit codes: EPILOG below (what `--help` prints).
"""

from __future__ import annotations

import argparse
import json
import sys

from trainables.common.cli import OneLineParser
from trainables.common.errors import DataError, EnvironmentFault
from trainables.common.exit_codes import Exit
from trainables.config import ConfigError, load_config
from trainables.preflight import preflight
from trainables.training.loop import train

EPILOG = """\
exit codes:
  0  the run trained (status ok)
  1  the run failed: oom, nan or error (still reported, with --json as its status)
  2  bad input, before any work: one line names the key or option
  5  the machine cannot run it: no CUDA for a config that needs it
"""


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(
        prog="python -m trainables.train",
        description=__doc__.splitlines()[0],
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", help="training YAML (a search config's `train:` section is used)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a training key, repeatable; the value is YAML: --set batch_size=64, "
        "--set precision=bf16, --set model.d_model=128 (a dotted key reaches into model)",
    )
    parser.add_argument("--data", help="corpus file or folder of .txt files")
    parser.add_argument("--out", help="write tokenizer, config and result here (same as --set out_dir=...)")
    parser.add_argument("--json", action="store_true", help="print the metrics as one JSON line at the end")
    argv = sys.argv[1:] if argv is None else argv
    if not argv:  # the seed's defaults alone train for hours: a bare command asks how it is used
        parser.usage_error(
            "--config is needed, e.g. --config configs/smoke.yaml (minutes on a CPU); "
            "configs/seed-baseline.yaml is the seed's own run (hours)"
        )
    args = parser.parse_args(argv)

    try:
        cfg = load_config(args.config, args.overrides, data=args.data)
        if args.out:
            cfg.out_dir = args.out
        found = preflight(cfg)  # the search runs the same checks (tuner/search.py)
    except (ConfigError, DataError) as err:
        print(f"error: {err}", file=sys.stderr)
        return Exit.BAD_INPUT
    except EnvironmentFault as err:
        print(f"error: {err}", file=sys.stderr)
        return Exit.ENVIRONMENT
    result = train(found.cfg, workload=found.workload)
    if args.json:
        print(json.dumps(result.metrics()))
    else:
        more = "".join(f" | {name} {value:.4f}" for name, value in (result.val_metrics or {}).items())
        print(
            f"{result.status}: val_loss {result.val_loss}{more} | {result.tokens_per_s} {result.unit}/s | "
            f"peak {result.peak_mem_mb} MB | {result.steps} steps"
        )
    return Exit.OK if result.status == "ok" else Exit.FAILED


if __name__ == "__main__":
    sys.exit(main())
