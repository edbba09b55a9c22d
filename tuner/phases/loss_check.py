"""The loss check: the baseline and the fastest screened config of each set of loss-relevant knobs train to
the full token budget, several at once on a GPU (fractions, each with a memory cap), since only their val
loss is used. Each trains with the fastest execution the screen found for its loss key (for a candidate,
itself; for the baseline, its twin). Round 0 holds the baseline, whose loss sets the loss limit every verdict
comes from (tuner.state.records.LossLimit). Which candidates train, in what order, and when it stops is
tuner/decide/loss_plan.py's: never one screened slower than the baseline or a passing config, the baseline's (batch,
lr) first, then spread over the others; `max_loss_checks` runs once a faster config passed, else as long as
`loss_check_time` allows. How it ended (LossCheckOutcome) goes to summary.json, and a cap or budget that left
faster configs unchecked is a notice and a line of report.md.

On GPUs the rounds need not wait for the screen: as its trials finish, the candidates round 0 would take if it
ended then train their loss runs beside it, in its GPUs' idle time, as the baseline's does. This phase only
plans them (`start_ahead`: which loss runs are wanted); tuner/runs/ahead.py:RunsAhead runs them,
and a round asks it for each candidate's row (`RunsAhead.loss_row`: trained ahead, or None, and the round
trains it now). Without them, four H100s spent 98 s in two rounds after a screen that left them 75-91% idle
(docs/benchmarks.md)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from trainables.config import TrainConfig
from trainables.spec import TrialSpec
from tuner.config import QualitySection, SearchSection
from tuner.decide.loss_plan import Limits, LossCheck, LossPlan, baseline_speed
from tuner.decide.select import Candidate
from tuner.decide.verdicts import LossVerdicts, lr_scaling_advice
from tuner.measure import baseline
from tuner.runs.ahead import RunsAhead
from tuner.runs.placement import PlacementPolicy, spread
from tuner.runs.request import Role, RunRequest
from tuner.runs.scheduler import RunScheduler
from tuner.runs.shapes import RunShapes
from tuner.runs.tasks import TaskRun
from tuner.space.knobs import execution, loss_key
from tuner.space.recipe import as_run_here, row_ids, times_baseline
from tuner.state.hardware import Hardware
from tuner.state.loss_outcome import LossCheckOutcome
from tuner.state.records import LossLimit, TrialRow
from tuner.state.search_state import SearchFailed

# What the loss runs beside the screen say so far (tuner/measure/loss_so_far.py:LossSoFar); None: not yet.
VerdictsSoFar = Callable[[], LossVerdicts | None]
# The shortest default of search.loss_check_time: a baseline whose loss run takes seconds still leaves time
# to check a few fast candidates past max_loss_checks while none has passed.
MIN_LOSS_CHECK_S = 120.0


@dataclass(frozen=True, kw_only=True)
class LossCheckInputs:
    """What the loss check and its runs ahead read of the search (built in tuner/pipeline.py): the search
    section and the loss rule, the baseline, the trials' hardware (the usual recipe as it runs here; the
    GPUs its rounds spread over), the run shapes, the placement after the probe, whether the loss check is
    done already (resumed, or a remembered answer: no runs ahead), the search's run scheduler (its rounds,
    its runs ahead and the baseline's beside the screen all go through it), the phase runner that records
    each round in OUT/state.json, and where notices go."""

    search: SearchSection
    quality: QualitySection
    base: TrainConfig
    hw: Hardware
    shapes: RunShapes
    placement: PlacementPolicy
    loss_checked: bool
    scheduler: RunScheduler
    phase: Callable[[str, Callable[[], Any], Any], Any]
    notice: Callable[[str], None]


def check_losses(
    inputs: LossCheckInputs,
    screen: list[TrialRow],
    beside: TaskRun | None = None,
    ahead: RunsAhead | None = None,
    seeds_beside: Sequence[TaskRun] = (),
) -> LossCheck:
    """The baseline's loss row (then, at a prefix of the planned run, its other seeds'), every candidate's,
    and how the check ended. With `beside` (the baseline's loss run, started with the screen) and
    `seeds_beside` (its runs at other seeds, baseline.start_seeds_beside), round 0 trains none of those, and
    the verdicts wait for their rows. With `ahead`, a candidate whose loss run trained beside the screen
    takes that run's row. Which candidates train, in what order, and when it stops: tuner/decide/loss_plan.py."""
    s = inputs.search
    plan = LossPlan.of(screen, inputs.base.model_dump(), limits(inputs), recipe_runs(inputs, screen))
    if s.loss_check_top == 0:
        plan.stop("loss_check_top")
    feasible = 0
    # the baseline's loss runs round 0 trains: its own and (at a prefix of the planned run) its other seeds',
    # less those trained beside the screen (asked for again only if they failed there)
    besides = [beside, *seeds_beside] if beside is not None else []
    base_specs, twin = _baseline_specs(inputs, screen, _seeds_to_train(inputs, beside, seeds_beside))
    base_row: TrialRow | None = None
    loss_limit: LossLimit | None = None
    rows: list[TrialRow] = []
    seed_rows: list[TrialRow] = []
    round_no = 0
    while base_row is None or plan.ended_by is None:
        extra = len(base_specs) if base_row is None else 0  # round 0 also trains the baseline
        batch = plan.next_round(_round_size(inputs, extra, feasible)) if plan.ended_by is None else []
        done_ahead = _rows_ahead(inputs, batch, ahead)  # first: a resumed round then sees the same cases
        own = [p for p in batch if p.id not in done_ahead]
        cases = (base_specs if extra else []) + [_spec(inputs, p) for p in own]
        training = sum(not run.done() for run in besides) if base_row is None else 0
        training += ahead.training() if ahead is not None else 0
        new = _train_round(inputs, round_no, cases, training)
        round_no += 1
        if base_row is None:
            own_base, new = new[: len(base_specs)], new[len(base_specs) :]
            base_row, seed_rows, loss_limit = _baseline_checked(inputs, screen, besides, own_base, twin)
            plan.limits = limits(inputs, base_row)  # its default time budget: the baseline's loss run's time
        assert loss_limit is not None  # round 0 set it with the baseline's row
        trained = iter(new)
        new = [done_ahead[p.id] if p.id in done_ahead else next(trained) for p in batch]
        new = [row.with_verdict(loss_limit) for row in new]  # in case order: the batch's order
        for pick, row in zip(batch, new, strict=True):
            plan.record(pick, bool(row.feasible))
        feasible += sum(bool(row.feasible) for row in new)
        rows += new
        plan.judge(_verdicts(inputs, loss_limit, [base_row, *rows], ahead))
    assert loss_limit is not None  # the loop ran round 0 at least
    outcome = _ended(inputs, plan, _verdicts(inputs, loss_limit, [base_row, *rows], ahead))
    return LossCheck(baseline=base_row, seeds=seed_rows, candidates=rows, outcome=outcome)


def _round_size(inputs: LossCheckInputs, extra: int, feasible: int) -> int:
    """A round of at most loss_check_top less those passed (at least one: a config faster than every passing
    one is still worth its run), in the places a round has beside `extra` baseline runs."""
    top = inputs.search.loss_check_top
    return max(0, min(inputs.placement.loss_round().concurrent - extra, max(1, top - feasible)))


def _train_round(
    inputs: LossCheckInputs, round_no: int, cases: list[TrialSpec], beside: int
) -> list[TrialRow]:
    """A round's runs, recorded as its phase in OUT/state.json (none: no cases)."""
    if not cases:
        return []
    return inputs.phase(
        f"loss_check_{round_no}", partial(_round, inputs, round_no, cases, beside), list[TrialRow]
    )


def _ended(inputs: LossCheckInputs, plan: LossPlan, verdicts: LossVerdicts) -> LossCheckOutcome:
    """How the check ended, said where a cap left faster configs unchecked or where larger batches failed
    at one lr that the space could scale."""
    outcome = plan.outcome()
    if line := outcome.line():
        inputs.notice(line)
    if advice := lr_scaling_advice(verdicts, inputs.search.space):
        inputs.notice(advice)
    return outcome


def _verdicts(
    inputs: LossCheckInputs, loss_limit: LossLimit, rows: list[TrialRow], ahead: RunsAhead | None
) -> LossVerdicts:
    """What every loss run so far says: this check's rows and the runs ahead that ended (not yet taken)."""
    seen = [(row.config, row) for row in rows] + [(s.knobs, s) for s in (ahead.finished() if ahead else [])]
    return LossVerdicts.of(inputs.base.model_dump(), loss_limit, seen)


def recipe_runs(inputs: LossCheckInputs, screen: list[TrialRow]) -> frozenset[str]:
    """The screen runs of the usual recipe as it runs here (tuner/space/recipe.py)."""
    return row_ids(screen, as_run_here(inputs.search, inputs.base, inputs.hw.model_dump()), inputs.base)


def limits(inputs: LossCheckInputs, base_row: TrialRow | None = None) -> Limits:
    """What bounds the candidates' loss runs: max_loss_checks, and loss_check_time (by default as long as
    the baseline's loss run took, `base_row`, at least MIN_LOSS_CHECK_S)."""
    s = inputs.search
    own = base_row.wall_s if base_row is not None and base_row.wall_s else 0.0
    return Limits(
        runs=run_budget(inputs),
        time_s=s.loss_check_time_s or max(MIN_LOSS_CHECK_S, own),
        tokens=inputs.shapes.horizon.tokens,
        remeasure_top=s.remeasure_top,
    )


def _seeds_to_train(
    inputs: LossCheckInputs, beside: TaskRun | None, seeds_beside: Sequence[TaskRun]
) -> list[int]:
    """The seeds of the baseline's loss runs round 0 trains: its own seed's unless `beside` trains it, and
    (at a prefix) each other seed's that no run of `seeds_beside` trains."""
    first, *others = baseline.loss_seeds(inputs.shapes)
    elsewhere = {run.spec.train.seed for run in seeds_beside}
    return ([first] if beside is None else []) + [seed for seed in others if seed not in elsewhere]


def _baseline_checked(
    inputs: LossCheckInputs,
    screen: list[TrialRow],
    besides: list[TaskRun],
    own: list[TrialRow],
    twin: TrialRow | None,
) -> tuple[TrialRow, list[TrialRow], LossLimit]:
    """The baseline's row with its verdict, its other seeds' rows and the loss limit they set: from its runs
    beside the screen (`besides`: its first seed's, then others') and those round 0 trained (`own`, in seed
    order after them), each labelled with the twin whose execution it took; SearchFailed where the baseline
    did not train."""
    pairs = _beside_or_own(inputs, screen, besides) + [(row, twin) for row in own]
    (row, row_twin), *others = pairs
    if row is None:  # its run beside the screen failed, and so did its round's (no row for its seed)
        raise SearchFailed("the baseline run failed: neither its run beside the screen nor its retry trained")
    if row.status != "ok" or row.val_loss is None:
        raise SearchFailed(f"the baseline run failed ({row.status}: {row.error})")
    seed_rows = [baseline.as_baseline(r, t, nth_seed=1) for r, t in others if r is not None]
    rule = baseline.BaselineLoss(inputs.shapes, inputs.quality, inputs.notice)
    base_row, loss_limit = baseline.checked(rule, baseline.as_baseline(row, row_twin), seed_rows)
    return base_row, seed_rows, loss_limit


def _rows_ahead(
    inputs: LossCheckInputs, batch: list[Candidate], ahead: RunsAhead | None
) -> dict[str, TrialRow]:
    """The rows of the batch's candidates whose loss runs trained ahead of the round (the scheduler waits
    for those still training); a candidate whose run failed trains in the round."""
    rows = {}
    for pick in batch:
        row = ahead.loss_row(_request(inputs, pick)) if ahead is not None else None
        if row is not None and row.status != "ok":
            inputs.notice(f"loss check: {pick.id}'s loss run beside the screen failed: it trains in a round")
        elif row is not None:
            rows[pick.id] = row
    return rows


def start_ahead(inputs: LossCheckInputs, verdicts: VerdictsSoFar | None = None) -> RunsAhead | None:
    """Loss runs ahead of the rounds, on GPUs with places to spare beside the screen (as the baseline's):
    those of the candidates round 0 would take if the screen ended now, less those the loss runs so far
    (`verdicts`) rule out (tuner/runs/ahead.py runs them)."""
    if inputs.loss_checked or not inputs.placement.room_beside():
        return None
    plan = _AheadPlan.of(inputs, verdicts)
    return RunsAhead(
        scheduler=inputs.scheduler,
        plan=plan.wanted,
        key_of=lambda knobs: loss_key(knobs, plan.base),
        limit=run_budget(inputs),
        at_once=max(1, inputs.hw.gpus),
    )


@dataclass(frozen=True, kw_only=True)
class _AheadPlan:
    """Which loss runs to train ahead, asked again as each screen row comes: what does not change from one
    row to the next is worked out once (`of`)."""

    inputs: LossCheckInputs
    base: dict[str, Any]
    limits: Limits
    # one more than round 0 takes: if one of them fails the loss limit, the next has trained already (on
    # four H100s batch 512 fp16 fails it, and a second round trains batch 16 tf32 for 58.5 s)
    top: int
    baseline_screened: bool  # the screen times the baseline (its recipe is in the space)
    verdicts: VerdictsSoFar | None = None  # what the loss runs beside the screen say so far

    @classmethod
    def of(cls, inputs: LossCheckInputs, verdicts: VerdictsSoFar | None = None) -> _AheadPlan:
        s = inputs.search
        screened = times_baseline(s.space, inputs.base)
        return cls(
            inputs=inputs,
            base=inputs.base.model_dump(),
            limits=limits(inputs),
            top=s.loss_check_top + 1,
            baseline_screened=screened,
            verdicts=verdicts,
        )

    def wanted(self, screen: list[TrialRow]) -> list[RunRequest]:
        """The loss runs of the fastest candidates so far that need one of their own, fastest first, each to
        train beside the screen (issue 43: in the loss check's order, never one screened slower than the
        baseline or a passing config)."""
        if self.baseline_screened and baseline_speed(screen, self.base) is None:
            return []  # until the screen has timed the baseline, "slower than the baseline" cannot be told
        inputs = self.inputs
        plan = LossPlan.of(screen, self.base, self.limits, recipe_runs(inputs, screen))
        plan.judge(self.verdicts() if self.verdicts is not None else None)
        picks = plan.queue[: self.top]
        return [RunRequest(_beside_screen(inputs, _spec(inputs, pick)), Role.AHEAD) for pick in picks]


def _beside_screen(inputs: LossCheckInputs, spec: TrialSpec) -> TrialSpec:
    """A loss run on one screen run's place of its GPU (as the baseline's) instead of its round's share."""
    return spec.with_placement(gpu_share=inputs.placement.beside_share(spec.train.model_dump()))


def run_budget(inputs: LossCheckInputs) -> int:
    """The most loss runs the loss check trains: `max_loss_checks`, by default twice `loss_check_top`."""
    s = inputs.search
    return s.max_loss_checks if s.max_loss_checks is not None else 2 * s.loss_check_top


def _baseline_specs(
    inputs: LossCheckInputs, screen: list[TrialRow], seeds: list[int]
) -> tuple[list[TrialSpec], TrialRow | None]:
    """The baseline's loss runs at `seeds` (with its twin's execution, and the twin's GPU share), cut to the
    loss horizon, and the twin whose execution they take."""
    if not seeds:
        return [], None
    rule = baseline.BaselineLoss(inputs.shapes, inputs.quality, inputs.notice)
    base_case, twin = baseline.loss_case(rule, screen)
    noise = baseline.noise_cases(inputs.shapes.horizon, base_case)
    cases = [c for c in [base_case, *noise] if c["seed"] in seeds]
    return [TrialSpec.of(case).with_placement(gpu_share=_gpu_share(inputs, twin)) for case in cases], twin


def _beside_or_own(
    inputs: LossCheckInputs, screen: list[TrialRow], besides: list[TaskRun]
) -> list[tuple[TrialRow | None, TrialRow | None]]:
    """The rows of the baseline's runs beside the screen, each with the twin whose execution it took: from
    the run (the twin: its start point's screen run), or, where it failed, from a round of their own (None
    where that round gave no row for its seed)."""
    found = [_beside_kept(inputs, screen, run) for run in besides]
    failed = [run.spec.train.seed for run, row in zip(besides, found, strict=True) if row is None]
    again: dict[int, TrialRow] = {}
    specs, twin = _baseline_specs(inputs, screen, failed)
    if specs:
        trained = inputs.phase(
            "loss_check_baseline", lambda: _round(inputs, "baseline", specs), list[TrialRow]
        )
        again = {row.train.get("seed"): row for row in trained}
    point_twin = next((r for r in screen if besides and r.config == besides[0].point), None)
    pairs = [(row, point_twin) if row is not None else (again.get(run.spec.train.seed), twin)
             for run, row in zip(besides, found, strict=True)]  # fmt: skip
    return pairs[:1] + [(row, t) for row, t in pairs[1:] if row is not None]  # a seed's row lost: no noise


def _beside_kept(inputs: LossCheckInputs, screen: list[TrialRow], run: TaskRun) -> TrialRow | None:
    """A baseline's run beside the screen: its row, or None where it failed, or where a run trained anew
    with its fastest twin's execution ends sooner (then it is stopped, and a round trains that one)."""
    if baseline.sooner_anew(baseline.BaselineLoss(inputs.shapes, inputs.quality, inputs.notice), run, screen):
        run.cancel()
        inputs.notice(
            f"the baseline's loss run at seed {run.spec.train.seed} beside the screen would end later than one "
            "trained anew with its fastest twin's execution: stopped, it trains anew now"
        )
        return None
    return baseline.beside_row(inputs.scheduler, run, inputs.base, inputs.notice)


def _spec(inputs: LossCheckInputs, pick: Candidate) -> TrialSpec:
    """A candidate's loss run, labelled with the screen trial it checks, whose execution it trains with."""
    case = inputs.shapes.case(Role.LOSS, pick.config)  # the same prefix as the baseline's, at a prefix
    spec = TrialSpec.of(
        case, knobs=pick.config, screen_id=pick.id, twin_of=pick.id, execution=execution(case)
    )
    return spec.with_placement(gpu_share=_gpu_share(inputs, pick.row))


def _request(inputs: LossCheckInputs, pick: Candidate) -> RunRequest:
    return RunRequest(_spec(inputs, pick), Role.LOSS)


def _round(
    inputs: LossCheckInputs, round_no: int | str, cases: list[TrialSpec], beside: int = 0
) -> list[TrialRow]:
    # Full token budget, the baseline's seed and data order; GPU fractions with a memory cap each.
    requests = [RunRequest(case, Role.LOSS) for case in spread(cases, inputs.hw.gpus, beside)]
    return inputs.scheduler.cases(f"loss_check_{round_no}", requests, inputs.placement.loss_round())


def _gpu_share(inputs: LossCheckInputs, screened: TrialRow | None) -> float | None:
    return inputs.placement.loss_share(screened.peak_mem_mb if screened else None)
