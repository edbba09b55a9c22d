"""Quieting Ray's log noise about failed trials.

A trial that fails (or is lost with its node) gets one line from the runner's LedgerCallback as it
happens. Left alone, Ray adds a traceback per trial, Tune's closing list of the failed trials and the
raylet's notices of a dead worker or raylet, which bury that line; these filters drop them (Ray's line
that a node was marked dead stays). TUNE_PRINT_ALL_TRIAL_ERRORS=1 brings the tracebacks back.
"""

from __future__ import annotations

import logging
import re

import ray

from model import library_env


class _AlreadyReported(logging.Filter):
    """Drops Tune's closing list of failed trials: LedgerCallback has said each in one line as it failed."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Trials did not complete")


# The raylet's notices of a dead worker (with OOM-killer advice) and of a dead raylet (with its log's tail)
RAYLET_NOTICES = re.compile("A worker died or was killed|Raylet is terminated")


def quiet_trial_failures() -> None:
    """One line per failed or lost trial (LedgerCallback's), instead of Ray's traceback, its closing list and the
    raylet's notices of a dead worker or raylet (Ray's line that a node was marked dead stays).
    TUNE_PRINT_ALL_TRIAL_ERRORS=1 brings the tracebacks back."""
    library_env.one_line_trial_errors()
    tune_log = logging.getLogger("ray.tune.tune")
    if not any(isinstance(f, _AlreadyReported) for f in tune_log.filters):
        tune_log.addFilter(_AlreadyReported())
    # The driver's error listener prints what the raylet pushes; private API, so only where it is as known.
    worker = getattr(getattr(ray, "_private", None), "worker", None)
    show = getattr(worker, "print_to_stdstream", None)
    if show is None or getattr(show, "quiet_worker_deaths", False):
        return

    def print_to_stdstream(data: dict, ignore_prefix: bool) -> None:
        lines = data.get("lines") or []
        if data.get("pid") == "raylet" and any(RAYLET_NOTICES.search(line) for line in lines):
            return
        show(data, ignore_prefix)

    print_to_stdstream.quiet_worker_deaths = True
    worker.print_to_stdstream = print_to_stdstream
