"""Exit codes of `python -m trainables.train` and `python -m tuner.search`: one home, so the two commands,
their --help and the README say the same thing."""

from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    OK = 0  # a config was chosen / the run trained
    FAILED = 1  # the search or the run failed; its last lines say why and what to run next
    BAD_INPUT = 2  # found before any work: one line names the key or option
    # the baseline is the answer: nothing passed the loss check, or nothing that passed was faster beyond
    # the re-measure's noise (a tie the baseline won); one code for one answer, whichever way it was reached
    BASELINE_STAYS = 3
    UNTRUSTED = 4  # the speed figures are not trusted (outside load through the re-measure)
    ENVIRONMENT = 5  # the machine, not the input: Ray cannot start or be reached, no GPU where one is needed
    NOTHING_SCREENED = 6  # the screen finished no config (its budget ended during the compiles)
    INTERRUPTED = 130  # Ctrl-C or SIGTERM: resumable
