"""The re-measure: the fastest feasible configs and the baseline, each timed alone on its GPU several times,
so the answer rests on medians and spreads of exclusive timed windows, not on one brief screen. Their
compiles overlap each other (the caches are warm by now), but a timed window waits until no run on its GPU
is compiling: a launch-bound config loses speed to compiles on the CPUs it launches from.

Load from outside the search must not pick the answer: the repeats go round robin over the configs and the
baseline (runner.round_robin), so a burst lands on all of them alike, and a window that was contended
(TrialRow.contended) is timed again, up to as many extra runs as the config was asked for. What stays
contended after that is left to selection, which crowns no winner on it (select.refuse_untrusted).

The baseline's runs stop where its figure can no longer change which config is the answer
(`baseline_settled`): its repeats beyond the finalists' come in a later round (`first_round`), and after each
round its further runs, repeats and re-runs alike, are left out once no figure it could time would change
the pick (no feasible finalist but it, or every other finalist timed far beyond it)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from trainables.config import TrainConfig
from trainables.spec import TrialSpec
from tuner.config import SearchSection
from tuner.decide.finalists import baseline_settled
from tuner.runs.placement import PlacementPolicy
from tuner.runs.request import Placement, Role, RunRequest
from tuner.runs.scheduler import RunScheduler
from tuner.runs.shapes import RunShapes
from tuner.space.recipe import as_run_here, in_reach, row_ids
from tuner.state.hardware import Hardware
from tuner.state.records import BASELINE_ID, TrialRow

# steps one re-measure run of each finalist trains under torch.profiler after its timed window
# (trainables/training/profile.py): a fraction of its timed steps, enough for each op's share
PROFILE_STEPS = 10


@dataclass(frozen=True, kw_only=True)
class RemeasureInputs:
    """What the re-measure reads of the search (built in tuner/pipeline.py): the search section, the
    baseline and the trials' hardware (the usual recipe's finalist), the run shapes, the placement after the
    probe, the search's run scheduler its runs go through, whether it confirms a remembered answer (fewer
    repeats), and where its notices go."""

    search: SearchSection
    base: TrainConfig
    hw: Hardware
    shapes: RunShapes
    placement: PlacementPolicy
    scheduler: RunScheduler
    confirming: bool
    notice: Callable[[str], None]


def time_finalists(
    inputs: RemeasureInputs, screen: list[TrialRow], planned_s: float | None = None
) -> list[TrialRow]:
    """`planned_s`: the search's estimate of this phase (eta.py), for its progress lines."""
    feasible = [t for t in screen if t.feasible and t.status == "ok"]
    feasible.sort(key=lambda t: -(t.tokens_per_s or 0))
    finalists: list[tuple[str, dict]] = [(BASELINE_ID, {})]
    shapes = inputs.shapes
    cases = [shapes.case(Role.REMEASURE)]
    peaks: list[float | None] = [None]  # the baseline is not screened (its twin is)
    for t in feasible:  # distinct configs only
        case = shapes.case(Role.REMEASURE, t.config)
        if case not in cases and len(finalists) <= inputs.search.remeasure_top:
            finalists.append((t.id, t.config))
            cases.append(case)
            peaks.append(t.peak_mem_mb)
    recipe = _recipe_finalist(inputs, feasible)  # beside the top, where the screen cannot tell them apart
    if recipe is not None and shapes.case(Role.REMEASURE, recipe.config) not in cases:
        finalists.append((recipe.id, recipe.config))
        cases.append(shapes.case(Role.REMEASURE, recipe.config))
        peaks.append(recipe.peak_mem_mb)
    base_runs, runs = inputs.search.remeasure_runs(confirming=inputs.confirming)
    wanted = [base_runs] + [runs] * (len(cases) - 1)
    specs, asked, peaks = profiled_once(finalists, cases, wanted, peaks)
    placement = inputs.placement.remeasure(first_round([s.labels.finalist for s in specs], asked), peaks)
    rows = measure(inputs, specs, asked, placement, planned_s)
    return [row.speed_only() for row in rows]


def _recipe_finalist(inputs: RemeasureInputs, feasible: list[TrialRow]) -> TrialRow | None:
    """The usual recipe's screen run, when it passed the loss check and its screen figure is in reach of the
    fastest feasible one's (tuner/space/recipe.py): the answer is then picked against it on exclusive runs."""
    ids = row_ids(feasible, as_run_here(inputs.search, inputs.base, inputs.hw.model_dump()), inputs.base)
    mine = next((t for t in feasible if t.id in ids), None)
    top = feasible[0].tokens_per_s if feasible else None
    return mine if mine is not None and in_reach(mine.tokens_per_s, top) else None


def profiled_once(
    finalists: list[tuple[str, dict]], cases: list[dict], wanted: list[int], peaks: list[float | None]
) -> tuple[list[TrialSpec], list[int], list[float | None]]:
    """Each finalist's runs as two cases: one run that profiles its steps after its timed window (the
    report's profile line) and the rest that do not. A profile holds its GPU's gate while it runs, so
    profiling every repeat would queue every other window behind it (15 profiles in the default search's
    re-measure). Both cases carry the finalist's label, so its figures are still all its runs'. The
    baseline is profiled only when it is the only finalist (so the answer): the profile line is the
    answer's, and the eager baseline's profile held its GPU's gate for 30 s while its other windows waited
    (one H200, docs/benchmarks.md)."""
    specs, asked, sized = [], [], []
    for (finalist, knobs), case, runs, peak in zip(finalists, cases, wanted, peaks, strict=True):
        profiled = 0 if finalist == BASELINE_ID and len(finalists) > 1 else 1
        if profiled:
            specs.append(
                TrialSpec.of({**case, "profile_steps": PROFILE_STEPS}, finalist=finalist, knobs=knobs)
            )
            asked.append(1)
            sized.append(peak)
        if runs > profiled:
            specs.append(TrialSpec.of(case, finalist=finalist, knobs=knobs))
            asked.append(runs - profiled)
            sized.append(peak)
    return specs, asked, sized


def measure(
    inputs: RemeasureInputs,
    cases: list[TrialSpec],
    asked: Sequence[int],
    placement: Placement,
    planned_s: float | None = None,
) -> list[TrialRow]:
    """Every case timed `asked[i]` times in uncontended windows where that can be had: contended windows
    are timed again (bounded by `more_runs`); the counts follow from the ledger, so --resume goes on.
    The baseline's cases (labelled BASELINE_ID) get their repeats beyond the finalists' in a later round,
    and no further run once `baseline_settled` says its figure cannot change the answer.
    `planned_s` is the estimate of the first pass (the windows timed again are not in it). `placement` is
    sized for the first round's runs: Ray fills a GPU's places before the next GPU's, so places sized for
    all 15 runs the default search asks for put 8 of its first round's 12 on one of 2 H200s, whose
    windows then took turns while the other GPU timed 4 (docs/benchmarks.md)."""
    base = [case.labels.finalist == BASELINE_ID for case in cases]
    counts, runs = first_round([case.labels.finalist for case in cases], asked), inputs.scheduler
    requests = [RunRequest(case, Role.REMEASURE) for case in cases]  # one scheduler: a row keeps its join
    while True:
        # contention is known once joined: the scheduler's rows come back joined
        rows = runs.cases("remeasure", requests, placement, repeats=counts, planned_s=planned_s)
        planned_s = None
        wanted = more_runs(rows, asked)
        settled = baseline_settled(rows, inputs.base.tokens) if any(base) else None
        if settled is not None:  # the baseline's further runs are left out; the finalists' go on
            wanted = [c if b else w for w, c, b in zip(wanted, counts, base, strict=True)]
        if all(w <= c for w, c in zip(wanted, counts, strict=True)):
            return rows  # finish says what was left out, from the finalists' record (finalists.left_out)
        again = sum(max(0, w - max(c, a)) for w, c, a in zip(wanted, counts, asked, strict=True))
        if again:  # beyond a case's repeats; the baseline's later repeats are not re-runs
            inputs.notice(
                f"remeasure: {again} contended or failed run{'s' if again != 1 else ''} timed again "
                "(each config at most twice its repeats)"
            )
        counts = [max(w, c) for w, c in zip(wanted, counts, strict=True)]


def first_round(finalists: Sequence[str | None], asked: Sequence[int]) -> list[int]:
    """The runs each case (of finalist `finalists[i]`) gets in the re-measure's first round: `asked[i]`,
    but the baseline's cases together at most as many as any other finalist is asked for, and at least one:
    its further repeats wait for a later round, which `baseline_settled` may leave out."""
    others: dict[str | None, int] = {}
    for fid, n in zip(finalists, asked, strict=True):
        if fid != BASELINE_ID:
            others[fid] = others.get(fid, 0) + n
    budget = max(1, max(others.values(), default=0))
    out = []
    for fid, n in zip(finalists, asked, strict=True):
        if fid == BASELINE_ID:
            n = min(n, budget)
            budget -= n
        out.append(n)
    return out


def more_runs(rows: list[TrialRow], asked: Sequence[int]) -> list[int]:
    """How many runs each case needs so that `asked[i]` of them timed an uncontended window, at most
    2 x asked[i]. A run that timed nothing (its process died, an error) is run again too: on one H200 of
    two, 7 of the 100M search's 9 re-measure runs died at once 34 s in, the baseline's three among them,
    and without a rerun the answer goes out with no baseline speed and no ratio."""
    out = []
    for i, want in enumerate(asked):
        mine = [r for r in rows if r.case == i]
        clean = sum(1 for r in mine if r.status == "ok" and not r.contended)
        out.append(min(2 * want, len(mine) + max(0, want - clean)))
    return out
