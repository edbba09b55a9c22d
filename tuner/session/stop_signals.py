"""Whether a stop signal really arrived: only then did a search end "interrupted" (exit 130).

Ray Tune catches SIGINT itself while it runs an experiment: its handler ends fit() early, with trials
unfinished, and puts back the handler it replaced; it chains to nothing. A fit() that returns early for any
other reason (a trial Tune failed without reporting it, e.g. "Could not re-use actor") is a failure, not an
interrupt. `TuneSigint` (a Tune callback, set up once Tune has installed its handler) tells the two apart
by whether Tune's handler was used, and puts the search's own handler back after the experiment either way:
Tune leaves its handler installed after a fit() that ended on its own, where a later Ctrl-C would only set
the flag of an experiment long over. The search's own handlers (SIGTERM) note the signal here too (`note`).
"""

from __future__ import annotations

import signal
import threading
from typing import Any

from ray.tune import Callback, Stopper

_received: list[str] = []  # the stop signals this process received, by name, in order


def note(signum: int) -> None:
    """Record a stop signal (called by the search's signal handlers, and for a SIGINT Tune caught)."""
    _received.append(signal.Signals(signum).name)


def received() -> str | None:
    """The first stop signal this process received (e.g. "SIGINT"), or None."""
    return _received[0] if _received else None


class TuneSigint(Callback):
    """Around one fit(): whether Tune's SIGINT handler caught a Ctrl-C (`caught`), once `restore` ran."""

    def __init__(self):
        self.before = signal.getsignal(signal.SIGINT)  # the search's (or Python's) handler
        self.tune_handler = None  # what Tune installed for this experiment (None: it installed nothing)
        self.caught = False

    def setup(
        self,
        stop: Stopper | None = None,
        num_samples: int | None = None,
        total_num_samples: int | None = None,
        **info: Any,
    ) -> None:
        now = signal.getsignal(signal.SIGINT)
        if now is not self.before:
            self.tune_handler = now

    def restore(self) -> bool:
        """After fit(): whether Tune caught a SIGINT (it then put `before` back); Tune's handler, where it is
        still installed, is replaced by `before`. Call it from the thread that called fit()."""
        now = signal.getsignal(signal.SIGINT)
        if self.tune_handler is None:
            return self.caught
        if now is self.tune_handler:
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGINT, self.before)
        elif now is self.before:
            self.caught = True
            note(signal.SIGINT)
        return self.caught
