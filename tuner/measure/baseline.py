"""The baseline: the user's own training config. Its speed is measured like every other config's (screen,
re-measure); its loss is trained to the full token budget with the fastest execution the screen saw for
its loss key (its twin: the same batch, precision, lr rule, differing only in compile, kernels, loader ...),
because those knobs change how fast a run goes, not where it ends. With no twin screened it trains as is.

On GPUs its loss run does not wait for the screen: when a start point shares the baseline's loss knobs (the
default config's first one, the baseline under CUDA graphs) it trains with that execution from the screen's
start, beside it, in its GPU's idle time (`start_beside`; trainables/training/gate.py says how it yields to every
timed window). It was the loss check's longest run, 102-122 s of its 113-131 s on 4 H200s, so the loss check
no longer waits for it. At a prefix of the planned run (tuner/rules/horizon.py) its run at a second seed, for the
seed noise, trains beside the screen with it (`start_seeds_beside`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from trainables.common.progress import log
from trainables.config import TrainConfig
from trainables.spec import TrialSpec
from tuner.config import Knob, QualitySection
from tuner.rules.horizon import LossHorizon
from tuner.rules.loss_limit import LossRun, warn_of_scale
from tuner.runs.placement import PlacementPolicy
from tuner.runs.request import Role, RunRequest
from tuner.runs.scheduler import RunScheduler
from tuner.runs.shapes import RunShapes
from tuner.runs.tasks import TaskRun
from tuner.space.domains import start_point
from tuner.space.knobs import execution, loss_key
from tuner.state.records import BASELINE_ID, LossLimit, TrialRow

# A run the early stopper or the time budget stopped after steady steps has proven its execution works and
# how fast: the baseline under CUDA graphs is slow next to large batches and is often stopped early, and
# without it the baseline's loss run trains at eager speed (13 minutes on an H100 instead of 1.5).
PROVEN = ("ok", "stopped")


BESIDE_WHO = "baseline-loss"  # its name at its GPU's timing gate


@dataclass(frozen=True, kw_only=True)
class Beside:
    """What the baseline's runs beside the screen read of the search, built by the pipeline: the shape of
    its runs (the baseline, the loss horizon), where they go, the scheduler that starts them and keeps
    their ledger, the start points as given (one lends its execution), whether the loss check is done
    already (resumed, or a remembered answer), and where a notice goes."""

    shapes: RunShapes
    placement: PlacementPolicy
    scheduler: RunScheduler
    start_points: Sequence[dict[str, Any]]
    loss_checked: bool
    notice: Callable[[str], None]


@dataclass(frozen=True)
class BaselineLoss:
    """What the baseline's loss runs and the limit they set read of the search, built by the phase that
    trains them: the shape of its runs (the baseline, the loss horizon), the loss rule, and where a notice
    goes."""

    shapes: RunShapes
    quality: QualitySection
    notice: Callable[[str], None]


def start_beside(b: Beside, space: dict[str, Knob]) -> TaskRun | None:
    """Starts the baseline's loss run beside the screen, on one speed-run place of a GPU (None: on CPUs,
    where a run takes every core; with one place in all, which it would take from the screen; when not even
    the baseline's own point is in the space; or when the loss check is done already)."""
    if b.loss_checked or not b.placement.room_beside():
        return None
    base = b.shapes.base
    point = beside_point(b, space)
    if point is None:
        return None
    case = b.shapes.case(Role.BESIDE, _execution_of(base, point))
    spec = TrialSpec.of(case).with_placement(gpu_share=b.placement.beside_share(case))
    run = _start_or_kept(b.scheduler, spec, BESIDE_WHO, point)
    if run.ref is not None:
        how = ", ".join(f"{k}={v}" for k, v in execution(case).items() if getattr(base, k) != v)
        log(f"[baseline] its loss run trains beside the screen ({how}), in its GPU's idle time")
    return run


def start_seeds_beside(b: Beside, first: TaskRun | None) -> list[TaskRun]:
    """At a prefix of the planned run, the baseline's runs at its other seeds (`noise_cases`) beside the
    screen as its first seed's is (`first`: same execution, same GPU share), where the screen keeps a place
    with them all; else none, and round 0 of the loss check trains them. For configs/hybrid-100m.yaml a
    seed's run is 8M tokens of fp32 at ~18-36K tok/s: 4-7 minutes the loss check no longer waits for."""
    if first is None:
        return []
    seeds = noise_cases(b.shapes.horizon, first.spec.train.model_dump())
    if not seeds or b.loss_checked or not b.placement.room_beside(runs=1 + len(seeds)):
        return []
    runs = [
        _start_or_kept(
            b.scheduler,
            first.spec.with_train(seed=case["seed"]),
            f"{BESIDE_WHO}-seed{case['seed']}",
            first.point,
        )
        for case in seeds
    ]
    if any(run.ref is not None for run in runs):
        log(f"[baseline] its runs at seeds {[c['seed'] for c in seeds]} train beside the screen too")
    return runs


def start_run_beside(runs: RunScheduler, spec: TrialSpec, who: str, point: dict[str, Any]) -> TaskRun:
    """`spec` as a Ray task on its GPU share (its placement's), `who` at its GPU's gate."""
    return runs.start(RunRequest(spec, Role.BESIDE), who, point)


def _start_or_kept(runs: RunScheduler, spec: TrialSpec, who: str, point: dict[str, Any]) -> TaskRun:
    """The run beside the screen at the spec's seed: started, or (its row in the ledger from before a
    resume) a run with no task whose row `beside_row` reads back."""
    if kept_rows(runs, spec.train.seed):
        return TaskRun(None, spec, point, time.time())
    return start_run_beside(runs, spec, who, point)


def kept_rows(runs: RunScheduler, seed: int) -> list[TrialRow]:
    """The rows the ledger of runs beside the screen holds for the baseline's run at `seed`."""
    return [r for r in runs.rows(Role.BESIDE) if r.train.get("seed") == seed]


def beside_point(b: Beside, space: dict[str, Knob]) -> dict[str, Any] | None:
    """The execution the baseline's loss run beside the screen takes: the first given start point that shares
    its loss knobs (the default config's: the baseline under CUDA graphs), else the baseline's own point as
    the screen runs it. Without it, a config that names no such start point (nanoGPT's, the HF Llama's)
    knew no loss limit until the screen had ended, so nothing the loss runs learn reached the screen's sampler
    (issue 54; one H100, 2026-12-07). Where the screen then finds a much faster twin, the loss check trains it
    anew with that twin's execution if that ends sooner (`sooner_anew`)."""
    return _twin_point([*b.start_points, {}], space, b.shapes.base, b.notice)


def sooner_anew(b: BaselineLoss, run: TaskRun, screen: list[TrialRow]) -> bool:
    """Whether the baseline's loss run beside the screen, still training, would end later than a run of it
    trained anew now with the execution of its fastest twin (tokens at the twin's screened speed plus its
    warm-up): by its own screened speed since it started, which overstates how far it got, since it yielded
    every timed window to the screen."""
    if run.done():
        return False
    own = next((r.tokens_per_s for r in screen if r.config == run.point and r.tokens_per_s), None)
    fastest = twin(b.shapes.base, screen)
    if own is None or fastest is None or not fastest.tokens_per_s or fastest.tokens_per_s <= own:
        return False
    tokens = b.shapes.horizon.tokens
    left_s = tokens / own - (time.time() - run.started)
    return tokens / fastest.tokens_per_s + (fastest.warmup_s or 0.0) < left_s


def _twin_point(
    given_points: Sequence[dict[str, Any]],
    space: dict[str, Knob],
    base: TrainConfig,
    notice: Callable[[str], None],
) -> dict[str, Any] | None:
    """The first start point (as the screen runs it) that shares the baseline's loss knobs."""
    values = base.model_dump()
    for given in given_points:
        point = start_point(given, space, base, notice)
        if point and loss_key(point, values) == loss_key({}, values):
            return point
    return None


def beside_row(
    runs: RunScheduler, run: TaskRun, base: TrainConfig, notice: Callable[[str], None]
) -> TrialRow | None:
    """The beside run's row, once it has finished (a line every WAIT_LINE_S while it trains on), recorded by
    the scheduler; None when it failed, and the loss check trains it itself."""
    seed = run.spec.train.seed
    what = "the baseline's loss run" + ("" if seed == base.seed else f" at seed {seed}")
    kept = kept_rows(runs, seed)[:1]  # recorded before a resume
    row = runs.record(Role.BESIDE, kept)[0] if kept else runs.task_row(run, what)
    if row.status != "ok":
        notice(f"{what} beside the screen failed ({row.error}): it trains again now")
        return None
    return row


def twins(base: TrainConfig, screen: list[TrialRow]) -> dict[tuple, TrialRow]:
    """The fastest screen run of each loss key that trained steady steps without failing."""
    fastest: dict[tuple, TrialRow] = {}
    values = base.model_dump()
    for row in screen:
        if row.status not in PROVEN or not row.tokens_per_s:
            continue
        key = loss_key(row.config, values)
        if key not in fastest or row.tokens_per_s > (fastest[key].tokens_per_s or 0.0):
            fastest[key] = row
    return fastest


def twin(base: TrainConfig, screen: list[TrialRow]) -> TrialRow | None:
    """The fastest screen run that shares the baseline's loss knobs (None: none screened)."""
    return twins(base, screen).get(loss_key({}, base.model_dump()))


def loss_case(b: BaselineLoss, screen: list[TrialRow]) -> tuple[dict[str, Any], TrialRow | None]:
    """The baseline's loss run (its config with its twin's execution, at the loss horizon) and the twin
    (None: none screened)."""
    twin_row = twin(b.shapes.base, screen)
    if twin_row is None:
        b.notice("no screened config shares the baseline's loss knobs: its loss run trains as configured")
        return b.shapes.case(Role.LOSS), None
    return b.shapes.case(Role.LOSS, _execution_of(b.shapes.base, twin_row.config)), twin_row


def _execution_of(base: TrainConfig, knobs: dict[str, Any]) -> dict[str, Any]:
    """The speed-only knobs `knobs` sets over the baseline: what it trains, run as `knobs` runs."""
    return execution({**base.model_dump(), **knobs})


def loss_seeds(shapes: RunShapes) -> list[int]:
    """The seeds the baseline's loss runs train: its own, and at a prefix of the planned run one more."""
    return [shapes.base.seed, *(c["seed"] for c in noise_cases(shapes.horizon, shapes.base.model_dump()))]


def noise_cases(horizon: LossHorizon, case: dict[str, Any]) -> list[dict[str, Any]]:
    """At a prefix of the planned run, the baseline's loss run at a second seed (seed + 1), whose difference
    from the first is the seed-to-seed noise the loss limit allows for; at the full run, none."""
    return [{**case, "seed": case["seed"] + 1}] if horizon.is_prefix else []


def as_baseline(row: TrialRow, twin: TrialRow | None, nth_seed: int = 0) -> TrialRow:
    """The loss run's row, labelled as the baseline's, with the execution it borrowed (`nth_seed` > 0: one
    of its runs at another seed, for the seed noise, labelled baseline-seed<seed>)."""
    return row.model_copy(
        update={
            "id": f"{BASELINE_ID}-seed{row.train.get('seed')}" if nth_seed else BASELINE_ID,
            "phase": BASELINE_ID,
            "config": {},
            "execution": execution(row.train),
            "twin_of": twin.id if twin else None,
        }
    )


def loss_limit_of(
    quality: QualitySection, horizon: LossHorizon, baseline: LossRun, seeds: Sequence[LossRun]
) -> LossLimit:
    """The loss limit the baseline's loss run and its other seeds' runs set at the loss horizon (a failed seed
    run leaves the noise unmeasured)."""
    more = [s.val_loss for s in seeds if s.status == "ok" and s.val_loss is not None]
    if baseline.val_loss is None:
        raise ValueError("the baseline's loss run has no val loss: it sets no loss limit")
    return quality.loss_limit(baseline.val_loss, horizon, more)


def split_checked(b: BaselineLoss, rows: list[TrialRow]) -> tuple[TrialRow, LossLimit, list[TrialRow]]:
    """The loss check's rows (loss_check.check_losses: the baseline's, its other seeds', the candidates') as the
    baseline's row, the loss limit and the candidates' rows: how the pipeline reads a finished or resumed
    phase."""
    seeds = [r for r in rows[1:] if r.phase == BASELINE_ID]
    return (
        rows[0],
        loss_limit_of(b.quality, b.shapes.horizon, rows[0], seeds),
        [r for r in rows[1:] if r.phase != BASELINE_ID],
    )


def checked(
    b: BaselineLoss, baseline: TrialRow, seeds: list[TrialRow] | None = None
) -> tuple[TrialRow, LossLimit]:
    """The baseline row, with its verdict, and the loss limit it sets (with `seeds`, its runs at other seeds),
    of a baseline that trained (where it did not, the search cannot go on: phases/loss_check.py says so)."""
    for seed in seeds or []:
        if seed.status != "ok" or seed.val_loss is None:
            b.notice(
                f"the baseline's run at seed {seed.train.get('seed')} failed ({seed.error}): seed noise unmeasured"
            )
    loss_limit = loss_limit_of(b.quality, b.shapes.horizon, baseline, seeds or [])
    baseline = baseline.with_verdict(loss_limit)
    changed = {k: v for k, v in (baseline.execution or {}).items() if getattr(b.shapes.base, k) != v}
    how = ", ".join(f"{k}={v}" for k, v in changed.items())
    how = f"as its twin {baseline.twin_of} runs ({how})" if baseline.twin_of else f"with {how}"
    how = how if changed else "as configured"
    where = _at(loss_limit)
    log(f"baseline: val loss {baseline.val_loss:.4f} (limit {loss_limit.limit:.4f}), trained {how}{where}")
    warn_of_scale(loss_limit, b.notice)  # a tolerance that does not fit the loss's scale: one notice
    return baseline, loss_limit


def _at(loss_limit: LossLimit) -> str:
    """Where the loss limit was applied, for the log: nothing at the full planned run."""
    if loss_limit.horizon is None or not loss_limit.horizon.is_prefix:
        return ""
    seeds = ", ".join(f"{loss:.4f}" for loss in loss_limit.seed_losses)
    noise = "seed noise unmeasured"
    if loss_limit.noise is not None:
        noise = f"seeds {seeds}, noise {loss_limit.noise:.4f}"
    horizon = loss_limit.horizon
    return f", at a prefix of {horizon.tokens:,} tokens ({horizon.fraction:.1%} of the run; {noise})"
