"""Quieting Ray's log noise about failed trials.

A trial that fails (or is lost with its node) gets one line from the runner's PhaseProgress as it
happens. Left alone, Ray adds a traceback per trial, Tune's closing list of the failed trials and the
raylet's notices of a dead worker or raylet, which bury that line; these filters drop them (Ray's line
that a node was marked dead stays). TUNE_PRINT_ALL_TRIAL_ERRORS=1 brings the tracebacks back.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

import ray

from model import library_env

# The raylet's notices of a dead worker (with OOM-killer advice) and of a dead raylet (with its log's tail)
RAYLET_NOTICES = re.compile("A worker died or was killed|Raylet is terminated")


class _AlreadyReported(logging.Filter):
    """Drops Tune's closing list of failed trials: PhaseProgress has said each in one line as it failed."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Trials did not complete")


def quiet_trial_failures() -> None:
    """One line per failed or lost trial (PhaseProgress's), instead of Ray's traceback, its closing list and the
    raylet's notices of a dead worker or raylet (Ray's line that a node was marked dead stays).
    TUNE_PRINT_ALL_TRIAL_ERRORS=1 brings the tracebacks back."""
    library_env.one_line_trial_errors()
    tune_log = logging.getLogger("ray.tune.tune")
    if not any(isinstance(f, _AlreadyReported) for f in tune_log.filters):
        tune_log.addFilter(_AlreadyReported())
    drop_raylet_notices()


def drop_raylet_notices() -> bool:
    """Wraps the driver's printer of what the raylet publishes so it skips RAYLET_NOTICES; whether the
    wrapper is in place (False: this Ray has no such printer, and the notices print as Ray prints them).

    The one patch on Ray's private API, for want of a public one (checked on Ray 2.60.0, the version
    pyproject.toml pins). Every driver's ray.init starts a thread (`ray._private.worker.
    listen_error_messages`) that prints each error the cluster publishes for the job through the module's
    `print_to_stdstream`, looked up at each call, straight to stdout: not through `logging`, so no logging
    filter or `ray.LoggingConfig` (the workers' root logger) reaches it, and not gated by
    `ray.init(log_to_driver=False)` (the trials' own output, which the search already keeps off the
    driver: their cache-sync lines reach it in each trial's result instead), nor by any RAY_* variable.
    Should a later Ray move or rename it, nothing is patched and the notices show again; nothing fails."""
    worker = getattr(getattr(ray, "_private", None), "worker", None)
    show = getattr(worker, "print_to_stdstream", None)
    if worker is None or show is None:
        return False
    if not getattr(show, "quiet_worker_deaths", False):
        worker.print_to_stdstream = _without_notices(show)
    return True


def _without_notices(show: Callable[[dict, bool], None]) -> Callable[[dict, bool], None]:
    def print_to_stdstream(data: dict, ignore_prefix: bool) -> None:
        lines = data.get("lines") or []
        if data.get("pid") == "raylet" and any(RAYLET_NOTICES.search(line) for line in lines):
            return
        show(data, ignore_prefix)

    print_to_stdstream.__dict__["quiet_worker_deaths"] = True  # a second call leaves it wrapped once
    return print_to_stdstream
