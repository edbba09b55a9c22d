"""A ledger row's fields from what a trial was and what it left: its `TrialSpec`, its last report, its error.

The runner's LedgerRecorder turns each finished Ray trial into one row of the ledger; what a row keeps of the
trial's metrics, and how a failure reads in one line, is decided here, apart from the running of trials.
A trial's last report is a `TrialResult` (trainables/training/result.py); a row keeps each of its fields but those
NOT_IN_ROW names, so a figure added there reaches the ledger without a list here to update; its spec's
labels (trainables/spec.py:TrialLabels) are TrialRow fields of the same names, so a phase labels its rows
by the specs it hands the runner, never by editing the rows it gets back.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from ray import cloudpickle
from ray.exceptions import RayActorError, RayTaskError

from trainables.common.errors import first_line
from trainables.spec import TrialSpec
from trainables.training.result import TrialResult

PLACEMENT_KEYS = ("node", "node_id", "gpu", "pid")  # all a failed trial's row keeps of its metrics

# The one place a figure of a trial's result is left out of its row, and why: every other field of
# TrialResult is a TrialRow field of the same name (tests/test_records.py fails on one that is neither).
NOT_IN_ROW = {
    "device": "the torch device string; a row says where it ran by node, node_id and gpu",
    "params": "the model's parameter count: printed by the run, never compared by the search",
    "history": "the eval curve: in the run's own result.json, not reported to Ray",
    "cache_sync": "what a node's compile-cache sync did: a notice in the trial's log and Ray result",
    "unit": "what the speeds count: the workload's, one for the whole search (summary.json's unit)",
}
# What a row keeps of a trial's last report, besides its status and speed (which need care: CAREFUL).
CAREFUL = ("status", "tokens_per_s")
RESULT_KEYS = tuple(f.name for f in fields(TrialResult) if f.name not in {*NOT_IN_ROW, *CAREFUL})


def trial_row(
    metrics: dict[str, Any] | None,
    spec: TrialSpec,
    error: Any,
    path: str | None,
    trial_id: str | None = None,
) -> dict[str, Any]:
    """The fields of a row from a trial's spec and what it left: its last metrics, its error (the ledger
    adds the phase and id). `trial_id` (the Ray trial's own) keys the row: metrics that name another trial
    are not this one's (a reused worker answers with its previous trial's until it is reset) and are
    dropped. A failed trial keeps only where it ran: a speed or loss it reported before failing is no result."""
    m = dict(metrics or {})
    if trial_id is not None and m.get("trial_id") not in (None, trial_id):
        m = {}
    status = m.get("status")
    if error is not None:
        m = {k: m.get(k) for k in PLACEMENT_KEYS}
        status, m["error"] = "error", describe_error(error, m.get("pid"))
    elif status in (None, "running"):
        status = "stopped"  # the stopper ended it before its final report
    labels = asdict(spec.labels)
    speed = m.get("tokens_per_s")
    return {
        "config": labels.pop("knobs"),
        "train": spec.trained.model_dump(),  # the whole config the trial trained, its GPU share's cap too
        **labels,
        "ray_trial_id": trial_id or m.get("trial_id"),
        "status": status,
        "tokens_per_s": speed
        if isinstance(speed, int | float) and math.isfinite(speed) and speed > 0
        else None,
        **{k: m.get(k) for k in RESULT_KEYS},
        "path": path,
    }


def describe_error(error: BaseException, pid: int | None = None) -> str:
    """One line: a dead worker in words, a trial's own exception as `Type: first line`."""
    if isinstance(error, RayTaskError) and not isinstance(error.cause, RayActorError):
        error = error.cause  # the trainable's own exception, not Ray's wrapper around it
    if isinstance(error, RayActorError):
        where = f" (pid {pid})" if pid else ""
        return f"WorkerDied: the trial's worker process{where} died: killed, or crashed (e.g. out of memory)"
    return f"{type(error).__name__}: {first_line(error)[:300]}"


def trial_error(trial) -> BaseException:
    """The error Ray recorded for a failed trial. Read from the driver's copy: `get_pickled_error()` reads
    the trial's storage, which Ray syncs only after the callbacks have run."""
    path = trial.pickled_error_file
    try:
        with open(path, "rb") as f:
            return cloudpickle.load(f)
    except Exception:  # noqa: BLE001 - no readable record (or one that cannot be rebuilt here): still failed
        return RuntimeError("the trial's worker failed")


def untold_end(trial) -> str:
    """Why a Ray trial ended without a row: what Tune wrote in its error file (a trial it failed without
    calling on_trial_error, e.g. a reused worker it could not reset), or the status Tune left it in."""
    lines: list[str] = []
    with contextlib.suppress(OSError, TypeError):  # TypeError: no error file (None)
        lines = [s for s in Path(trial.error_file).read_text().splitlines() if s.strip()]
    said = [s for s in lines if not s.startswith("Failure # ")]
    if said and "reset_config()" in said[-1]:  # Tune's words for it: what happened, then theirs
        return (
            f"Ray trial {trial.trial_id} failed in Ray Tune: the reused worker it was given was still ending "
            f"its previous trial after Tune's 2 s wait ({said[-1][:200]})"
        )
    if said:
        return f"Ray trial {trial.trial_id} failed in Ray Tune, before it could report: {said[-1][:300]}"
    return f"Ray trial {trial.trial_id} never finished (Tune left it {trial.status})"
