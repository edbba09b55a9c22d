"""A durable ledger of finished runs, one per phase: OUT/trials/<phase>.jsonl.

The driver appends each finished trial to it the moment Ray reports it (flushed and fsync'd). That ledger,
not Ray's periodic experiment snapshot, is the record: after a crash, `--resume` runs only what the ledger
lacks, found by each run's spec key (tuner/runs/request.py:spec_key), in a fresh experiment
(OUT/ray/<phase>-r<k>), so no finished trial is rerun and none is counted twice. Trials that were running
when the driver died left no row: they rerun. A trial lost with its node leaves no row either: the phase
reruns it so (at most NODE_LOSS_RERUNS times)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ray.tune import Callback

from tuner.runs.phase_progress import PhaseProgress, trial_spec
from tuner.runs.request import Role, spec_key
from tuner.session.node_loss import died_with_node
from tuner.state.records import TrialRow, short_node_id
from tuner.state.trial_rows import trial_error, trial_row, untold_end

# How often `on_row` is told the rows again with no trial finished: a listener that starts runs when a place
# frees (the loss runs ahead of the loss check) must not wait for the next trial to end, which may be never
# (one H200: when the screen's last 3 trials are stopped by its budget, two fused finalists found 85 s
# before its end never train ahead and the loss check trains them for 68 s after it)
RETELL_S = 5.0


class Ledger:
    """OUT/trials/<phase>.jsonl: one row per finished trial, appended as it finishes."""

    def __init__(self, out: Path, phase: str):
        self.path = out / "trials" / f"{phase}.jsonl"
        self.phase = phase

    def rows(self) -> list[TrialRow]:
        if not self.path.exists():
            return []
        rows = []
        for line in self.path.read_text().splitlines():
            try:
                rows.append(TrialRow.model_validate_json(line))
            except ValueError:  # a line cut short by a crash: that trial reruns
                continue
        return rows

    def best_speed(self) -> float:
        """The best speed of its finished runs (0: none yet), where a phase's progress lines start from."""
        return max((r.tokens_per_s or 0 for r in self.rows() if r.status == "ok"), default=0)

    def has(self, ray_trial_id: str) -> bool:
        return any(r.ray_trial_id == ray_trial_id for r in self.rows())

    def finished(self, wanted: Mapping[tuple[int, int], str]) -> dict[tuple[int, int], TrialRow]:
        """The rows of the wanted runs ((case, repeat) -> spec key) that the ledger holds, found by their spec
        key; a row written before rows had one, by its (case, repeat) as before. The first row of each."""
        by_key: dict[str, TrialRow] = {}
        by_place: dict[tuple[int | None, int | None], TrialRow] = {}
        for row in self.rows():
            if row.spec_key is not None:
                by_key.setdefault(row.spec_key, row)
            else:
                by_place.setdefault((row.case, row.repeat), row)
        found = {at: by_key.get(key) or by_place.get(at) for at, key in wanted.items()}
        return {at: row for at, row in found.items() if row is not None}

    def append(self, fields: dict[str, Any]) -> TrialRow:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        row = TrialRow(**fields, phase=self.phase, id=f"{self.phase}-{len(self.rows())}")
        with self.path.open("ab+") as f:
            if _ends_cut(f):
                f.write(b"\n")  # never onto a line cut short: that would lose this row too
            f.write(row.model_dump_json().encode() + b"\n")
            f.flush()
            os.fsync(f.fileno())
        return row


def _ends_cut(f) -> bool:
    """Whether the file's last line lacks its newline (a crash cut it short)."""
    if f.seek(0, os.SEEK_END) == 0:
        return False
    f.seek(-1, os.SEEK_END)
    return f.read(1) != b"\n"


class LedgerRecorder(Callback):
    """Writes each finished trial to the ledger (one row per Ray trial; a trial lost with its node reruns)
    and tells its phase's progress lines (PhaseProgress, a callback of their own), where given, what it
    recorded."""

    def __init__(
        self,
        ledger: Ledger,
        rerun_lost: bool = False,
        on_row: Callable[[list[TrialRow]], None] | None = None,
        role: Role | None = None,
        progress: PhaseProgress | None = None,
    ):
        self.ledger, self.role = ledger, role  # role: in each spec key
        self.on_row = on_row  # told the phase's rows each time one is added, and every RETELL_S
        self.rerun_lost = rerun_lost  # a trial lost with its node gets no row: the phase reruns it
        self.progress = progress  # told each trial recorded or lost
        self.lost: list[str] = []  # the Ray trials lost with their nodes, left to rerun
        self.last_told = time.time()
        self.failure: Exception | None = None  # the first error of its own; _fit raises it after the run
        self.recorded = {r.ray_trial_id for r in ledger.rows()}  # Ray trials with a row, or lost
        self.untold: dict[str, str] = {}  # Ray trials Tune failed without telling us -> why, in words
        self.trials: list = []

    def on_trial_start(self, iteration, trials, trial, **info):
        self.trials = trials  # Tune's own list of the experiment's trials, kept up to date by Tune

    def on_experiment_end(self, trials, **info):
        self.find_untold(trials)

    def find_untold(self, trials=None) -> bool:
        """Whether Tune failed a trial without calling on_trial_error (a reused worker it could not reset;
        its searcher is not told either, and a concurrency limit then waits on it for 10 minutes): it has
        no row, the experiment stops (LedgerFailed) and the phase fails naming it."""
        for trial in self.trials if trials is None else trials:
            if trial.status == "ERROR" and trial.trial_id not in self.recorded | self.untold.keys():
                self.untold[trial.trial_id] = untold_end(trial)
        return bool(self.untold)

    def on_step_begin(self, iteration, trials, **info):
        """The rows told again every RETELL_S."""
        if self.on_row is not None and time.time() - self.last_told >= RETELL_S:
            self._guarded(self._retell)

    def _retell(self) -> None:
        self.last_told = time.time()
        if self.on_row is not None:  # on_step_begin calls it only then
            self.on_row(self.ledger.rows())

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._guarded(lambda: self._finish(trials, trial, None))

    def on_trial_error(self, iteration, trials, trial, **info):
        self._guarded(lambda: self._finish(trials, trial, trial_error(trial)))

    def _guarded(self, record: Callable[[], None]) -> None:
        """Ray Tune turns a callback's exception into a failure of the trial it is about: a trial that
        finished would be recorded as failed. An error of the record's own (a full disk, a bug) is kept
        instead, the experiment stops (LedgerFailed) and the phase fails with it."""
        if self.failure is not None:
            return
        try:
            record()
        except Exception as err:  # noqa: BLE001 - raised by _fit once Tune has stopped
            self.failure = err

    def _finish(self, trials, trial, error):
        self.recorded.add(trial.trial_id)  # from here on, told: a row, a rerun, or a record's failure
        if self.progress is not None:
            self.progress.stall.advanced()
        if self.ledger.has(trial.trial_id):  # one row per Ray trial: a finished trial is never rewritten
            return
        fields = _row_fields(trial, error, self.role)
        if error is not None and died_with_node(error, fields["node_id"]):
            node = short_node_id(fields["node_id"])
            if self.rerun_lost:  # no row: the phase runs it again
                self.lost.append(trial.trial_id)
                if self.progress is not None:
                    self.progress.lost(trial.trial_id, node)
                return
            fields["error"] = f"NodeDied: the trial's node {node} died, and the trial with it"
        row = self.ledger.append(fields)
        if self.on_row is not None:
            self._retell()
        if self.progress is not None:
            self.progress.finished(row, trials, trial)


def _row_fields(trial, error, role: Role | None) -> dict[str, Any]:
    """A finished Ray trial's row fields, its spec key among them."""
    spec = trial_spec(trial.config)
    fields = trial_row(trial.last_result, spec, error, trial.path, trial.trial_id)
    return {**fields, "spec_key": spec_key(spec, role)}
