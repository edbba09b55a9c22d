"""Which candidates the loss check trains, in what order, and when it stops: a plan over the screen's rows and
the verdicts so far, with no Ray in it, so the rules are tested alone and a recorded search can be replayed
through it (tuner/phases/loss_check.py runs its rounds; tests/test_loss_plan.py replays issue 43's case).

The rules (issue 43, a nanoGPT search that ended with the baseline kept while batch-64 bf16 configs it had
timed at 4-5x were never checked):
- never a loss run for a config screened slower than the baseline (its screen row: one with no knob changed,
  when the screen has one) or than the fastest config already passing (a group that passed, the baseline's
  own loss group included): neither could be the answer;
- first, the fastest candidate at the baseline's (effective batch, peak lr), execution and precision changed
  only, the likeliest to pass; the rest round robin over the (batch, lr) points, each point's candidates
  fastest first, points ordered by their fastest; after a failure at a point, other points first;
- never a loss run for a config the loss runs so far rule out: a larger batch at the peak lr of one that failed
  (tuner/decide/verdicts.py; issue 54: nanoGPT's loss check trained batch 128 and 256 at one lr, both failed);
- `max_loss_checks` caps the runs once a config faster than the baseline passed; until one has, the check
  goes on past the cap while the estimated time of its runs (tokens / screened speed + the warm-up the
  screen saw) fits `loss_check_time`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field, model_validator

from tuner.decide.select import Candidate, could_be_remeasured, loss_check_candidates
from tuner.decide.verdicts import LossVerdicts
from tuner.rules.record_base import Record
from tuner.space.knobs import knob_diff, train_point
from tuner.space.recipe import in_reach
from tuner.state.loss_outcome import LossCheckEnd, LossCheckOutcome
from tuner.state.records import BASELINE_ID, TrialRow


def speed(row: TrialRow) -> float:
    value = row.tokens_per_s
    return value if isinstance(value, int | float) and math.isfinite(value) else -math.inf


def baseline_speed(screen: list[TrialRow], base: dict) -> float | None:
    """The baseline's screened speed: its screen row's (no knob changed; a stopped one counts, at its speed
    so far); None where the screen timed none."""
    speeds = [speed(r) for r in screen if r.status in ("ok", "stopped") and not knob_diff(r.config, base)]
    speeds = [s for s in speeds if s > -math.inf]
    return max(speeds) if speeds else None


def ordered(candidates: list[Candidate], base: dict) -> list[Candidate]:
    """The candidates that need a loss run, in the order the loss check takes them: the fastest at the
    baseline's (batch, lr) first, then round robin over the (batch, lr) points, each point's fastest first,
    points in the order of their fastest."""
    points: dict[tuple[int, float], list[Candidate]] = {}
    for pick in sorted((c for c in candidates if not c.inherits), key=lambda c: (-speed(c.row), c.id)):
        points.setdefault(train_point(pick.config, base), []).append(pick)
    home = points.get(train_point({}, base), [])
    out = home[:1]
    for turn in range(max((len(group) for group in points.values()), default=0)):
        out += [group[turn] for group in points.values() if turn < len(group) and group[turn] not in out]
    return out


@dataclass(frozen=True)
class Limits:
    """What bounds the loss check's candidate runs."""

    runs: int  # max_loss_checks: the cap once a config faster than the baseline passed
    time_s: float  # loss_check_time: until one has, runs go on while their estimated time fits it
    tokens: int  # each loss run's tokens (the loss horizon's)
    remeasure_top: int  # a candidate the re-measure could not time decides nothing


@dataclass(kw_only=True)
class LossPlan:
    """The loss check's queue and budget as its rounds go: `next_round` says which candidates train next,
    `record` takes each one's verdict, `outcome` says how it ended."""

    limits: Limits
    queue: list[Candidate]
    passed: list[Candidate]  # groups that passed (the baseline's own loss group from the start)
    base_speed: float | None
    base: dict
    reference: frozenset[str] = frozenset()  # the recipe's screen runs (tuner/space/recipe.py)
    failed_points: set[tuple[int, float]] = field(default_factory=set)
    ruled_out: list[Candidate] = field(default_factory=list)  # by a failure (tuner/decide/verdicts.py)
    runs: int = 0
    spent_s: float = 0.0
    ended_by: LossCheckEnd | None = None

    @classmethod
    def of(
        cls, screen: list[TrialRow], base: dict, limits: Limits, reference: frozenset[str] = frozenset()
    ) -> LossPlan:
        """`reference`: the recipe's screen runs. Its group is checked second (after the fastest at the
        baseline's batch and lr) and stays while its screen figure is in reach of the floor
        (recipe.in_reach): screen figures of compiled runs can be far under their figures alone."""
        queue, passed = _queued(screen, base, reference)
        speed = baseline_speed(screen, base)
        plan = cls(
            limits=limits, queue=queue, passed=passed, base_speed=speed, base=base, reference=reference
        )
        plan._drop_slower()
        return plan

    @property
    def floor(self) -> float:
        """The speed a candidate must beat to be worth a loss run: the baseline's screened speed and every
        passing config's."""
        return max([self.base_speed or -math.inf, *(speed(p.row) for p in self.passed)])

    @property
    def passed_faster(self) -> bool:
        """Whether a config screened faster than the baseline passed (any, where its speed is not known)."""
        return any(speed(p.row) > (self.base_speed or -math.inf) for p in self.passed)

    def next_round(self, take: int) -> list[Candidate]:
        """Up to `take` candidates to train now; none (and `ended_by` set) when the check is over. A slower
        candidate the re-measure could not time if the round's faster picks passed waits for a later round."""
        self._drop_slower()
        batch: list[Candidate] = []
        for pick in self._preferred():
            if len(batch) >= take:
                break
            remeasured = self._is_reference(pick) or could_be_remeasured(
                pick, [*self.passed, *batch], self.limits.remeasure_top
            )  # the re-measure times the recipe beside its top
            if not remeasured:
                continue
            if not self._affords([*batch, pick]):
                self.ended_by = "max_loss_checks" if self.passed_faster else "loss_check_time"
                break
            batch.append(pick)
        if take > 0 and not batch and self.ended_by is None:
            self.ended_by = "all_checked"
        self.queue = [c for c in self.queue if c not in batch]
        self.runs += len(batch)
        self.spent_s += sum(estimate_s(self.limits, p) for p in batch)
        return batch

    def judge(self, verdicts: LossVerdicts | None) -> None:
        """Takes out of the queue the candidates the loss runs so far rule out (a larger batch at the peak lr
        of a failure): their runs could only fail. One whose own loss run has ended (ahead of the round)
        stays: the round takes its row."""
        if verdicts is None:
            return
        out = [c for c in self.queue if verdicts.rules_out(c.config)]
        self.ruled_out += out
        self.queue = [c for c in self.queue if c not in out]

    def record(self, pick: Candidate, passed: bool) -> None:
        if passed:
            self.passed.append(pick)
        else:
            self.failed_points.add(train_point(pick.config, self.base))

    def stop(self, why: LossCheckEnd) -> None:
        self.ended_by = why

    def outcome(self) -> LossCheckOutcome:
        """How it ended, with the screened configs faster than the best passing one (or the baseline) that
        no loss run checked, fastest first."""
        floor = self.floor
        rows = [r for c in self.queue for r in c.rows if speed(r) > floor]
        return LossCheckOutcome(
            ended_by=self.ended_by or "all_checked",
            runs=self.runs,
            max_runs=self.limits.runs,
            estimated_s=round(self.spent_s, 1),
            time_budget_s=round(self.limits.time_s, 1),
            unchecked_faster=[r.id for r in sorted(rows, key=lambda r: (-speed(r), r.id))],
            ruled_out=[r.id for c in self.ruled_out for r in c.rows],
        )

    def _drop_slower(self) -> None:
        floor = self.floor
        self.queue = [c for c in self.queue if speed(c.row) > floor or _in_reach(self, c, floor)]

    def _is_reference(self, pick: Candidate) -> bool:
        return bool(self.reference & set(pick.covers))

    def _preferred(self) -> list[Candidate]:
        """The queue with the candidates at a (batch, lr) point that failed last."""
        failed: Callable[[Candidate], bool] = lambda c: train_point(c.config, self.base) in self.failed_points
        return [c for c in self.queue if not failed(c)] + [c for c in self.queue if failed(c)]

    def _affords(self, picks: list[Candidate]) -> bool:
        if self.runs + len(picks) <= self.limits.runs:
            return True
        if self.passed_faster:
            return False
        return self.spent_s + sum(estimate_s(self.limits, p) for p in picks) <= self.limits.time_s


def _queued(
    screen: list[TrialRow], base: dict, reference: frozenset[str]
) -> tuple[list[Candidate], list[Candidate]]:
    """The candidates in the order the check takes them (the recipe's group second) and the groups that pass
    already (the baseline's own)."""
    picks = loss_check_candidates(screen, base, len(screen))
    queue = ordered(picks, base)
    mine = [c for c in queue[1:] if reference & set(c.covers)]  # the first may be the recipe's own group
    return queue[:1] + mine + [c for c in queue[1:] if c not in mine], [p for p in picks if p.inherits]


def estimate_s(limits: Limits, pick: Candidate) -> float:
    """A loss run's time: its tokens at its screened speed, plus the compile and warm-up the screen saw."""
    return limits.tokens / speed(pick.row) + (pick.row.warmup_s or 0.0)


def _in_reach(plan: LossPlan, pick: Candidate, floor: float) -> bool:
    """The recipe's group, while its screen figure beats the baseline's and is in reach of the floor."""
    mine = [speed(r) for r in pick.rows if r.id in plan.reference]
    fastest = max(mine, default=-math.inf)
    return fastest > (plan.base_speed or 0.0) and in_reach(fastest, floor)


class LossCheck(Record):
    """What the loss-check phase returns: the baseline's loss row, its other seeds', the candidates', and how
    it ended."""

    baseline: TrialRow
    seeds: list[TrialRow] = Field(default_factory=list)
    candidates: list[TrialRow] = Field(default_factory=list)
    outcome: LossCheckOutcome | None = None

    @model_validator(mode="before")
    @classmethod
    def _older_list(cls, data: Any) -> Any:
        """A state.json from before kept the phase as one list: the baseline's row, then its seeds' (phase
        baseline), then the candidates'."""
        if not isinstance(data, list):
            return data
        phase = lambda r: r.get("phase") if isinstance(r, dict) else r.phase
        rest = data[1:]
        return {
            "baseline": data[0],
            "seeds": [r for r in rest if phase(r) == BASELINE_ID],
            "candidates": [r for r in rest if phase(r) != BASELINE_ID],
        }

    @property
    def rows(self) -> list[TrialRow]:
        return [self.baseline, *self.seeds, *self.candidates]
