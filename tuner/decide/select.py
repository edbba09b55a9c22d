"""Which configs need a loss run, which are feasible, and which one wins.

Pure functions over the search's records (`TrialRow`, `Finalist`), so the rules are testable without Ray or
a GPU. Configs are dicts of knob values; a knob missing from a config has the baseline's value.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tuner.decide.screen_outcome import finite
from tuner.space.knobs import freeze, knob_diff, loss_key
from tuner.state.records import (
    BASELINE_ID,
    FAILED_STATUSES,
    Finalist,
    LossLimit,
    SelectionResult,
    TrialRow,
    could_win,
)

ENERGY_MARGIN = 0.02  # J/token must be this much lower than the fastest's to outweigh simplicity


def _speed(trial: TrialRow) -> float:
    return trial.tokens_per_s if finite(trial.tokens_per_s) else -math.inf


@dataclass(frozen=True)
class Candidate:
    """The fastest screened trial of a group that shares one loss key, and who else is in the group."""

    row: TrialRow
    inherits: str | None  # "baseline": the baseline's own loss run stands for the group
    rows: tuple[TrialRow, ...]  # every screened trial in the group, fastest first

    @property
    def id(self) -> str:
        return self.row.id

    @property
    def covers(self) -> tuple[str, ...]:
        return tuple(r.id for r in self.rows)

    @property
    def config(self) -> dict[str, Any]:
        return self.row.config


def loss_check_candidates(screen_trials: list[TrialRow], baseline: dict, top: int) -> list[Candidate]:
    """The fastest screened config per distinct loss key, fastest first: the `top` ones that need a loss run,
    plus (not counted in `top`) the group that shares the baseline's key, which inherits the baseline's."""
    groups: dict[tuple, list[TrialRow]] = {}
    for trial in sorted(screen_trials, key=lambda t: (-_speed(t), t.id)):
        if trial.status == "ok" and finite(trial.tokens_per_s):
            groups.setdefault(loss_key(trial.config, baseline), []).append(trial)
    base_key = loss_key({}, baseline)
    out, to_check = [], 0
    for key, members in groups.items():  # insertion order = speed order of each group's fastest
        inherits = BASELINE_ID if key == base_key else None
        if inherits is None:
            if to_check >= top:
                continue
            to_check += 1
        out.append(Candidate(members[0], inherits, tuple(members)))
    return out


def could_be_remeasured(pick: Candidate, passed: Iterable[Candidate], top: int) -> bool:
    """Whether `pick` could still be one of the `top` feasible configs the re-measure times: fewer than
    `top` distinct configs of the groups that passed the loss check screened faster. Once that many have,
    a loss run for `pick` (or anything slower) decides nothing: the re-measure would never time it."""
    faster = {freeze(row.config) for group in passed for row in group.rows if _speed(row) > _speed(pick.row)}
    return len(faster) < top


def with_feasibility(
    screen_trials: list[TrialRow],
    checked: list[TrialRow],
    loss_limit: LossLimit,
    baseline: dict | None = None,
) -> list[TrialRow]:
    """The screen trials with `feasible`, `val_loss` and `loss_checked_by` set (new rows; the given ones are
    left as they were).

    A trial shares the loss limit's verdict on the loss run with its loss key (the baseline's own loss for the
    baseline's key); never checked -> feasible None; a trial that itself failed (oom/nan/error) -> False. The
    first check of a key stands (the search checks each key once). Without `baseline`, configs are compared
    on the knobs they name (enough when all come from one search space) and those naming only speed knobs
    inherit.
    """
    baseline = baseline or {}
    verdicts: dict[tuple, TrialRow] = {}
    for check in checked:
        verdicts.setdefault(loss_key(check.config, baseline), check)
    base_key = loss_key({}, baseline)

    def judged(trial: TrialRow) -> dict:
        if trial.status in FAILED_STATUSES:
            return {"feasible": False, "val_loss": None, "loss_checked_by": None}
        key = loss_key(trial.config, baseline)
        if key == base_key:
            base_loss = loss_limit.baseline_loss
            return {
                "feasible": loss_limit.passes(base_loss),
                "val_loss": base_loss,
                "loss_checked_by": BASELINE_ID,
            }
        if key in verdicts:
            check = verdicts[key]
            val = check.val_loss if finite(check.val_loss) else None
            return {"feasible": loss_limit.verdict(check), "val_loss": val, "loss_checked_by": check.id}
        return {"feasible": None, "val_loss": None, "loss_checked_by": None}

    return [trial.model_copy(update=judged(trial)) for trial in screen_trials]


def spread(values: Iterable[float]) -> tuple[float, float, float]:
    """(median, min, max) of the finite values; ValueError when there are none."""
    kept = [float(v) for v in values if finite(v)]
    if not kept:
        raise ValueError("spread() needs at least one finite value")
    return statistics.median(kept), min(kept), max(kept)


@dataclass
class Selection:
    winner: Finalist | None
    reasons: list[str] = field(default_factory=list)
    telemetry_changed_decision: bool = False
    rejected: dict[str, str] = field(default_factory=dict)
    finishes_later: str | None = None  # the faster finalist finish_first chose against
    tied: list[str] = field(default_factory=list)  # within the fastest's spread, the one the tie chose first
    tie_break: str | None = None  # why the tie chose tied[0]

    def to_record(self) -> SelectionResult:
        """The `selection` section of summary.json (the winner is recorded under `best`)."""
        return SelectionResult(
            reasons=list(self.reasons),
            telemetry_changed_decision=self.telemetry_changed_decision,
            rejected=dict(self.rejected),
            finishes_later=self.finishes_later,
            tied=list(self.tied),
            tie_break=self.tie_break,
        )


@dataclass(eq=False)  # identity: two finalists may carry equal numbers
class _Ranked:
    finalist: Finalist
    median: float
    lo: float
    hi: float
    n_knobs: int

    @property
    def id(self) -> str:
        return self.finalist.id

    @property
    def jpt(self) -> float | None:
        value = self.finalist.joules_per_token
        return value if finite(value) else None

    def describe(self) -> str:
        """Its figure and range; one run has no range, and [x–x] would read as a measured spread."""
        if len(self.finalist.runs) == 1:
            return f"{self.id} {self.median:,.0f} tok/s (one run)"
        return f"{self.id} {self.median:,.0f} tok/s [{self.lo:,.0f}–{self.hi:,.0f}]"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _rank(finalists: list[Finalist], baseline_knobs: dict, sel: Selection) -> list[_Ranked]:
    """Feasible finalists with at least one finite run, fastest median first; the rest go to `rejected`."""
    ranked = []
    for fin in finalists:
        fid = fin.id
        if fin.feasible is not True:
            never = fin.feasible is None
            sel.rejected[fid] = "not feasible: " + (
                "loss never checked" if never else "loss check failed or over the limit"
            )
            continue
        try:
            median, lo, hi = spread(fin.runs)
        except ValueError:
            sel.rejected[fid] = "no successful exclusive run"
            continue
        ranked.append(_Ranked(fin, median, lo, hi, len(knob_diff(fin.config, baseline_knobs))))
    if sel.rejected:
        sel.reasons.append("excluded: " + "; ".join(f"{fid} ({why})" for fid, why in sel.rejected.items()))
    return sorted(ranked, key=lambda r: (-r.median, r.id))


def _drop_untrusted(contenders: list[_Ranked], sel: Selection) -> list[_Ranked]:
    """Numbers from a run whose telemetry looked wrong (shared or throttled GPU) may not beat trusted ones."""
    trusted = [r for r in contenders if r.finalist.telemetry_trusted is not False]
    if not trusted:
        ids = ", ".join(r.id for r in contenders)
        sel.reasons.append(f"{ids}: telemetry untrusted, but no trusted config is within range")
        return contenders
    trusted_ids = ", ".join(t.id for t in trusted)
    for r in contenders:
        if r not in trusted:
            sel.rejected[r.id] = "telemetry untrusted while a trusted config is within its spread"
            sel.reasons.append(
                f"{r.id} not chosen: its telemetry is untrusted and {trusted_ids} is within its spread"
            )
    return trusted


def pick_winner(finalists: list[Finalist], baseline_knobs: dict) -> Selection:
    """Among feasible finalists whose exclusive-run ranges overlap the fastest's, the one with fewest
    non-default knobs, unless every one has J/token and another saves >= 2% over it: then the lowest J/token."""
    sel = Selection(winner=None)
    ranked = _rank(finalists, baseline_knobs, sel)
    if not ranked:
        sel.reasons.append(
            "no feasible finalist with a successful exclusive run: the baseline stays the answer"
        )
        return sel

    fastest = ranked[0]
    contenders = [r for r in ranked if r.lo <= fastest.hi and r.hi >= fastest.lo]
    for r in ranked:
        if r not in contenders:
            sel.rejected[r.id] = f"slower: {r.describe()} does not overlap {fastest.describe()}"
    contenders = _drop_untrusted(contenders, sel)

    lead = contenders[0]  # the fastest still in the running
    simplest = min(contenders, key=lambda r: (r.n_knobs, -r.median, r.id))
    efficient = _more_efficient(contenders, simplest)
    winner = efficient or simplest
    sel.winner = winner.finalist
    sel.telemetry_changed_decision = efficient is not None and efficient is not simplest

    if len(ranked) == 1:  # nothing else passed the loss check and was timed: there was no spread to compare
        sel.reasons.append(_alone(winner))
        return sel
    if len(contenders) == 1:
        sel.reasons.append(f"chose {winner.id}: {winner.describe()}, no other config within its spread")
        return sel
    ids = ", ".join(r.id for r in contenders[:-1]) + f" and {contenders[-1].id}"
    ranges = "; ".join(r.describe() for r in contenders)
    if efficient is not None:
        why = _energy_reason(efficient, simplest)
    elif winner is lead:
        why = "the fastest, with no more non-default knobs than the others"
    else:
        fewer = _plural(lead.n_knobs - winner.n_knobs, "fewer non-default knob")
        why = f"{fewer} than {lead.id} ({winner.n_knobs} vs {lead.n_knobs})"
    sel.reasons.append(f"{ids} overlap ({ranges}); chose {winner.id}: {why}")
    sel.tied, sel.tie_break = [winner.id, *(r.id for r in contenders if r is not winner)], why
    if sel.telemetry_changed_decision:
        sel.reasons.append(
            f"telemetry changed the decision: on speed and simplicity alone {simplest.id} would win"
        )
    _reject_tied(sel, contenders, winner, by_energy=efficient is not None)
    return sel


def _alone(winner: _Ranked) -> str:
    """Why the only feasible finalist with a timed run is chosen: there was nothing to compare it with."""
    if winner.id == BASELINE_ID:
        return f"the baseline stays: no other finalist passed the loss check with a timed run ({winner.describe()})"
    return f"chose {winner.id}: the only feasible finalist with a timed run ({winner.describe()})"


def _more_efficient(contenders: list[_Ranked], simplest: _Ranked) -> _Ranked | None:
    """Lower J/token wins among tied configs when it saves at least ENERGY_MARGIN over the pick that speed
    and simplicity alone would make (None: it does not, or not every contender has J/token)."""
    energies = [(r.jpt, r) for r in contenders if r.jpt is not None]
    if len(contenders) < 2 or len(energies) < len(contenders) or simplest.jpt is None:
        return None
    lowest_jpt, lowest = min(energies, key=lambda e: (e[0], -e[1].median, e[1].id))
    if lowest is not simplest and lowest_jpt <= simplest.jpt * (1 - ENERGY_MARGIN):
        return lowest
    return None


def _energy_reason(efficient: _Ranked, simplest: _Ranked) -> str:
    """Why the lower J/token won (_more_efficient picks one only where every contender has J/token)."""
    low, high = efficient.jpt, simplest.jpt
    assert low is not None and high is not None
    return f"{1 - low / high:.1%} lower J/token than {simplest.id}, the simplest ({low:.4g} vs {high:.4g})"


def _reject_tied(sel: Selection, contenders: list[_Ranked], winner: _Ranked, by_energy: bool) -> None:
    """Why each tied contender lost to the winner."""
    for r in contenders:
        if r is winner:
            continue
        if by_energy:
            why = f"higher J/token ({r.jpt:.4g} vs {winner.jpt:.4g})"
        elif r.n_knobs > winner.n_knobs:
            why = f"{_plural(r.n_knobs - winner.n_knobs, 'more non-default knob')}"
        else:
            why = f"as simple, lower median ({r.median:,.0f} tok/s)"
        sel.rejected[r.id] = f"tied with {winner.id} (ranges overlap); {why}"


# A warm-up is one figure (the shortest measured), and it varies by seconds: best.yaml's cached fused graph
# warms up in 12.8 s alone where the screen's hit took 10.7 s (one H200, docs/benchmarks.md). A plan that
# finishes the planned run sooner by less than this is a tie on warm-ups, not a reason to give up a faster
# config: without it a config 2.2x slower wins for finishing 10.24M tokens 0.3 s sooner (18.7 s vs 19.0 s).
WARMUP_NOISE_S = 3.0


def _times(fin: Finalist, tokens: int) -> tuple[float, float, float]:
    """(median, fastest, slowest) time to train `tokens` over the finalist's runs, warm-up included."""
    median, lo, hi = spread(fin.runs)
    warm = fin.warmup_s or 0.0
    return warm + tokens / median, warm + tokens / hi, warm + tokens / lo


def finish_first(sel: Selection, finalists: list[Finalist], tokens: int) -> Selection:
    """When another feasible finalist finishes the planned run of `tokens` sooner than the winner, beyond
    the spread of both and the warm-up's noise (the run is shorter than the winner's break-even against
    it), that one wins; not
    where the winner's warm-up was measured beside other warming-up runs, which may overstate it."""
    winner = sel.winner
    timed = [f for f in finalists if f.feasible is True and spread_or_none(f.runs)]
    if winner is None or not timed:
        return sel
    first = min(timed, key=lambda f: (_times(f, tokens)[0], f.id))
    if first.id == winner.id or _times(first, tokens)[2] + WARMUP_NOISE_S >= _times(winner, tokens)[1]:
        return sel
    if winner.warmup_beside:
        sel.reasons.append(_beside_warmup_note(winner, first, tokens))
        return sel
    why = (
        f"the planned run ({tokens:,} tokens) is shorter than {winner.id}'s break-even against {first.id}: "
        f"{first.id} finishes it in {_times(first, tokens)[0]:,.0f} s, {winner.id} in "
        f"{_times(winner, tokens)[0]:,.0f} s (compile + warm-up included)"
    )
    sel.reasons.append(f"chose {first.id}: {why}")
    sel.rejected.pop(first.id, None)
    sel.rejected[winner.id] = f"faster once running, but {why}"
    sel.finishes_later, sel.winner = winner.id, first
    return sel


def _beside_warmup_note(winner: Finalist, first: Finalist, tokens: int) -> str:
    """Why a planned-run time that favours `first` does not overturn `winner`: the winner's warm-up was
    measured while other runs warmed up beside it, which best.yaml's run, alone, does not pay. On one H100
    the fused batch-128 graph took 23-25 s among 15 re-measure runs warming up at once and 10 s among four
    per GPU, and its time to train lost to a torch config it outran 1.8x (docs/benchmarks.md)."""
    return (
        f"kept {winner.id}: on the warm-ups measured, {first.id} would finish the planned run ({tokens:,} "
        f"tokens) first ({_times(first, tokens)[0]:,.0f} s against {_times(winner, tokens)[0]:,.0f} s), but "
        f"{winner.id}'s {winner.warmup_s:,.1f} s warm-up was measured while {winner.warmup_beside} other "
        f"run{'s' if winner.warmup_beside != 1 else ''} warmed up beside it, and its run of best.yaml warms "
        "up alone"
    )


def spread_or_none(values: Iterable[float]) -> tuple[float, float, float] | None:
    try:
        return spread(values)
    except ValueError:
        return None


def refuse_untrusted(sel: Selection, finalists: list[Finalist]) -> bool:
    """No winner crowned on contended figures: when the baseline or a feasible finalist has only figures
    from contended windows (the re-measure repeated them, bounded, and load stayed), their order says more
    about the load than about the configs, so the baseline stays the answer. Returns whether it refused."""
    contenders = could_win(finalists)
    shaky = [f.id for f in finalists if not f.speed_trusted and (f.id == BASELINE_ID or f in contenders)]
    if not contenders or not shaky:
        return False
    why = (
        f"{', '.join(shaky)}: every timed window was contended (other processes used the CPUs or the GPU), "
        "also when repeated"
    )
    sel.reasons.append(f"no winner crowned on untrusted figures ({why}): the baseline stays the answer")
    if sel.winner is not None and sel.winner.id != BASELINE_ID:
        sel.rejected[sel.winner.id] = f"would have won on untrusted figures ({why})"
    sel.winner = None
    return True


def headline_untrusted(winner: Finalist | None, finalists: list[Finalist]) -> bool:
    """Whether a speed figure the answer gives rests on untrusted windows only: the winner's, or the
    baseline's (the answer where it stays, the ratio's denominator where it does not). Where nothing else
    passed the loss check, refuse_untrusted has no winner to refuse, and the baseline's figure (and the time
    to train from it) would otherwise stand as trusted."""
    said = {BASELINE_ID, winner.id if winner else BASELINE_ID}
    return any(not f.speed_trusted for f in finalists if f.id in said)
