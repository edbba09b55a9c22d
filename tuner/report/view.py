"""The summary as both reports show it: one entry per distinct config, the answer and why the rest lost.

report.md and report.html take every number, verdict and reason from here (an Entry per config from
entry.py, why each lost from rejection.py, the answer's sentences from answer.py; measured.py and
cost_section.py word how each number was measured and what the planned run costs), so the two never
disagree. Reads a typed Summary only, so a report can be rebuilt from a saved summary.json.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from trainables.common.progress import one_of
from tuner.report.answer import answer
from tuner.report.entry import COLUMN_KNOBS, Entry, entry_of
from tuner.report.fmt import as_summary, changed, fmt_warmup, short_ids
from tuner.report.gpu_section import Gpus, gpus
from tuner.report.measured import Facts
from tuner.report.mfu import shown
from tuner.report.rejection import rejection
from tuner.report.rows import group_rows
from tuner.report.trust import CONTENDED_NOTE as CONTENDED_NOTE  # the table's note, as view's
from tuner.state.records import Summary

TABLE_COLUMNS = (
    "Config",
    "Batch",
    "Workers",
    "Precision",
    "Compile",
    "Kernels",
    "Tok/s",
    "MFU",
    "Warm-up",
    "VRAM",
    "Loss",
    "vs baseline",
)
GPU_COLUMNS = ("VRAM", "J/token")  # left out of a search on CPUs: no GPU memory, no GPU energy
MFU_COLUMN = "MFU"  # left out too where no run counted its FLOPs (summaries from before MFU)
# Hardware entries about the hybrid's fused kernels (their libraries, their autotune set): listed only for a
# workload that implements `kernels`.
KERNEL_HARDWARE = ("backends", "autotune_set")


@dataclass
class View:
    """What both reports show: the summary, how it was measured, and its configs in report order."""

    summary: Summary
    facts: Facts
    entries: list[Entry]  # baseline first, then the winner, the rest by speed, failed configs last

    @classmethod
    def of(cls, summary: Summary | Mapping[str, Any]) -> View:
        summary = as_summary(summary)
        facts = Facts.of(summary)
        baseline, rows, winner = group_rows(summary)
        base_reason = rejection(baseline, summary) if winner else ""
        entries = [entry_of(summary, facts, baseline, "baseline", base_reason, baseline)]
        for row in rows:
            role = "winner" if row is winner else "other"
            reason = "" if row is winner else rejection(row, summary)
            entries.append(entry_of(summary, facts, row, role, reason, baseline))
        return cls(summary, facts, entries)

    def columns(self, head: tuple[str, ...]) -> tuple[str, ...]:
        """The table's columns: `head` without VRAM and J/token where the search ran on CPUs, and without
        the knobs the workload does not implement (Kernels for a model without fused kernels)."""
        knob_of = dict(zip(TABLE_COLUMNS[1:], COLUMN_KNOBS))
        off = {c for c, k in knob_of.items() if k in self.summary.knobs_left_out}
        off |= set() if self.facts.gpu_columns else set(GPU_COLUMNS)
        off |= set() if shown(self.summary, self.facts.gpu_columns) else {MFU_COLUMN}
        return tuple(c for c in head if c not in off)

    def heading(self, column: str) -> str:
        """A column's heading in the workload's unit: Tok/s -> Images/s, J/token -> J/image."""
        unit = self.summary.unit
        if unit == "tokens":
            return column
        return {"Tok/s": f"{unit[:1].upper()}{unit[1:]}/s", "J/token": f"J/{one_of(unit)}"}.get(
            column, column
        )

    @property
    def hardware(self) -> list[tuple[str, Any]]:
        """The hardware as both reports list it, the fused kernels' libraries only where the workload has
        fused kernels."""
        off = KERNEL_HARDWARE if "kernels" in self.summary.knobs_left_out else ()
        return [(key, value) for key, value in self.summary.hardware.items() if key not in off]

    @cached_property
    def gpus(self) -> Gpus | None:
        return gpus(self.summary)

    @property
    def notices(self) -> list[str]:
        """The search's notices (node ids cut short), then GPUs of a host that differ beyond the noise."""
        gpu_notices = self.gpus.notices if self.gpus else []
        return [short_ids(n) for n in self.summary.notices] + gpu_notices

    @property
    def baseline(self) -> Entry:
        return self.entries[0]

    @property
    def winner(self) -> Entry | None:
        return next((e for e in self.entries if e.role == "winner"), None)

    @property
    def losers(self) -> list[Entry]:
        return [e for e in self.entries if e.role == "other"]

    @property
    def run_command(self) -> str:
        return f"python -m trainables.train --config {self.summary.best_yaml or 'OUT/best.yaml'}"

    @property
    def cache_note(self) -> str:
        """What "Run it" says of the compile cache best.yaml names ("" when it names none)."""
        cache = self.summary.compile_cache
        if not cache:
            return ""
        pick = self.winner or self.baseline
        warm = f" (~{fmt_warmup(pick.warmup)} with them warm)" if pick.warmup is not None else ""
        return (
            f"best.yaml names the search's compile cache (`compile_cache: {cache}`), so this run reuses the "
            f"Inductor/Triton kernels the search compiled and pays the warm compile + warm-up{warm}, where "
            "that folder is reachable and torch and the GPU are the same."
        )

    @property
    def changes(self) -> dict[str, tuple[Any, Any]]:
        """What the recommended config changes from the baseline (empty when the baseline stays)."""
        best = self.summary.best
        return changed(best.config, self.summary.baseline.config) if best else {}

    @property
    def loss_check_note(self) -> str:
        """Under the answer, where a cap ended the loss check with faster configs unchecked ("" where none):
        the line summary.json's loss_check gives, which each unchecked config's rejection names alike."""
        capped = self.summary.loss_check.line() if self.summary.loss_check else None
        return f"Note: {capped}." if capped else ""

    @property
    def answer(self) -> str:
        """The reports' first sentences (answer.py): the winner against the baseline, or no change."""
        return answer(self.summary, self.baseline, self.winner)
