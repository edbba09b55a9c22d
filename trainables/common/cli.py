"""What the command lines share: a parser whose mistakes are one line, like every other bad input.

`python -m trainables.train`, `python -m tuner.search`, `python -m tuner.report` and `python -m tuner.emit`
build theirs from `OneLineParser`, so a mistyped option reads the same everywhere: "error: ... (see --help)",
exit 2, not argparse's usage block.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from trainables.common.exit_codes import Exit


class OneLineParser(argparse.ArgumentParser):
    """argparse, but an error is one line on stderr and exit 2 (Exit.BAD_INPUT); --help is unchanged."""

    def error(self, message: str) -> NoReturn:
        self.exit(int(Exit.BAD_INPUT), f"error: {message} (see --help)\n")

    def usage_error(self, message: str) -> NoReturn:
        """The usage block, then the one error line: for a bare command, which asks how it is used."""
        self.print_usage(sys.stderr)
        self.error(message)
