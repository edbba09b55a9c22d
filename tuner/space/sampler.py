"""The screen's sampler: Optuna's TPE, told what the screen measured (each config's tok/s) and what the loss
runs have found so far (how far a config's loss is over the limit: a TPE constraint), so it stops proposing
configs whose loss cannot pass and spends the screen where it can (issue 54: on nanoGPT, 9 of 16 screen
trials went to larger batches that all failed the loss, and no batch-32 config under CUDA graphs was tried).

Optuna through its own seams: the screen's study (OUT/optuna.journal, or an RDB URL) holds every config the
screen ran or refused, asked and told there (`enqueue_trial` + `ask` when a config starts, `tell` when it
ends). A loss verdict usually comes after the screen run it judges has been told, and a finished trial's
constraints cannot change, so each proposal is drawn from a mirror: an in-memory study of the screen's
trials as they stand, the finished ones constrained by what is known of their loss *now*
(`create_trial(constraints=...)`), the running ones as running (TPE's constant liar keeps proposals away from
them), the start points no trial has taken enqueued first, and TPE seeded with the study's length. Each
proposal records what it was drawn from (`DRAWN`), so `replayed` draws it again from the study alone
(bench/decisions_diff.py: did two searches decide the same).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import FrozenTrial, TrialState, create_trial

from tuner.config import Knob, Range
from tuner.space.knobs import freeze

CONSTRAINT = "loss"  # the constraint's name: the val loss over the limit (> 0 fails)
DRAWN = "drawn_from"  # user attribute of a proposal: the study's length, its running trials, the constraints
REFUSED = "refused"  # user attribute of a config refused before it ran: why
SAMPLER = "sampler"  # the study's user attribute: the seed, the startup trials and the start points
# Knobs whose values' cold first steps differ by minutes (max-autotune, the fused kernels' autotune): a value
# no run of the screen has finished yet gets one run at a time, its scout (`held_back`).
SCOUTED = ("compile", "kernels")
MAX_REPEATS = 50  # proposals in a row that repeat known configs before the space counts as exhausted

optuna.logging.set_verbosity(optuna.logging.WARNING)  # our progress lines say what the study does


class Verdicts(Protocol):
    """What the loss runs so far say of a config (tuner/decide/verdicts.py:LossVerdicts)."""

    def violation(self, config: dict[str, Any]) -> float | None:
        """Its loss over the limit as known now (> 0: fails; <= 0: passes), or None: nothing known."""
        ...


# The verdicts as they stand now (None: none yet, e.g. the baseline's loss run has not finished).
VerdictsNow = Callable[[], Verdicts | None]
# What a repeated proposal is answered (its measured value, or failed: it is running), or None: a new config.
Answer = Callable[[dict[str, Any]], float | TrialState | None]


def distributions(space: dict[str, Knob]) -> dict[str, BaseDistribution]:
    """The space's knobs as Optuna distributions (a choice list: categorical; a range: int or float)."""
    out: dict[str, BaseDistribution] = {}
    for name, knob in space.items():
        if isinstance(knob, Range) and knob.integer:
            out[name] = IntDistribution(int(knob.low), int(knob.high), log=knob.log)
        elif isinstance(knob, Range):
            out[name] = FloatDistribution(knob.low, knob.high, log=knob.log)
        else:
            out[name] = CategoricalDistribution(list(knob))
    return out


@dataclass(frozen=True)
class Draw:
    """One proposal's mirror study and what it was made of: the study's length then, the numbers of its
    trials still running, and the constraint of each finished one whose loss was judged."""

    study: optuna.Study
    trials: int
    running: tuple[int, ...] = ()
    constraints: dict[int, float] = field(default_factory=dict)
    # what the verdicts say of a config now (its constraint where known): set on each repeat told
    violation: Callable[[dict[str, Any]], float | None] = lambda config: None

    def record(self) -> dict[str, Any]:
        """What a proposal keeps of its draw (JSON: the study's user attributes)."""
        return {
            "trials": self.trials,
            "running": list(self.running),
            "constraints": {str(k): v for k, v in self.constraints.items()},
        }

    def first_new(
        self, space: dict[str, BaseDistribution], normalize: Callable, answer: Answer
    ) -> dict | None:
        """The first proposal `answer` does not know (a repeat is told its answer and TPE asked again); None
        after MAX_REPEATS repeats in a row: the space is exhausted."""
        for _ in range(MAX_REPEATS):
            trial = self.study.ask(space)
            config = normalize(trial.params)
            told = answer(config)
            if told is None:
                return config
            if isinstance(told, TrialState):
                self.study.tell(trial, state=told)
                continue
            over = self.violation(config)
            if over is not None:
                trial.set_constraint(CONSTRAINT, over)
            self.study.tell(trial, told)
        return None


@dataclass(kw_only=True)
class LossAwareTpe:
    """TPE over `space` on `study`, its first `startup_trials` proposals random, the start `points` first,
    each finished trial constrained by what `verdicts` say of its config when the next one is drawn."""

    study: optuna.Study
    space: dict[str, BaseDistribution]
    seed: int
    startup_trials: int
    points: tuple[dict[str, Any], ...] = ()
    verdicts: VerdictsNow | None = None

    def draw(self) -> Draw:
        """The mirror to draw the next proposal from, as the study and the verdicts stand now."""
        trials = self.study.get_trials(deepcopy=False)
        running = tuple(t.number for t in trials if t.state == TrialState.RUNNING)
        verdicts = self.verdicts() if self.verdicts is not None else None
        if verdicts is None:
            return mirror(self, trials, running, {})
        known = {t.number: verdicts.violation(t.params) for t in trials if t.state == TrialState.COMPLETE}
        constraints = {number: value for number, value in known.items() if value is not None}
        return mirror(self, trials, running, constraints, verdicts.violation)

    def start(self, config: dict[str, Any], draw: Draw) -> int:
        """`config` asked on the study (it starts now), with what it was drawn from; its trial number."""
        self.study.enqueue_trial(config)
        trial = self.study.ask(self.space)
        trial.set_user_attr(DRAWN, draw.record())
        return trial.number

    def refuse(self, config: dict[str, Any], why: str, over: float | None = None) -> None:
        """`config` kept in the study as measuring nothing (value 0), with why it was refused (and how far its
        loss is over the limit, where that is why)."""
        self.study.enqueue_trial(config)
        trial = self.study.ask(self.space)
        trial.set_user_attr(REFUSED, why)
        if over is not None:
            trial.set_constraint(CONSTRAINT, over)
        self.study.tell(trial, 0.0)

    def finish(self, number: int, value: float | None) -> None:
        """The trial's end: its measured tok/s (None: the run crashed and measured nothing TPE should read)."""
        if value is None:
            self.study.tell(number, state=TrialState.FAIL, skip_if_finished=True)
        else:
            self.study.tell(number, value, skip_if_finished=True)

    def measured(self) -> dict[Hashable, float]:
        """{frozen config: its best value} of every config the study holds finished."""
        out: dict[Hashable, float] = {}
        for trial in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            key, value = freeze(trial.params), float(trial.value or 0.0)
            out[key] = max(value, out.get(key, value))
        return out


def open_study(
    name: str,
    storage: optuna.storages.BaseStorage,
    seed: int,
    startup_trials: int,
    space: dict[str, Knob],
    points: Sequence[dict[str, Any]] = (),
    verdicts: VerdictsNow | None = None,
) -> LossAwareTpe:
    """The loss-aware TPE on the study `name` in `storage` (made, or loaded to go on), which keeps how it
    samples so that `reopened` replays it from the study alone."""
    study = optuna.create_study(
        study_name=name,
        storage=storage,
        load_if_exists=True,
        direction="maximize",
        sampler=optuna.samplers.RandomSampler(seed=seed),  # every trial is enqueued: it never draws
    )
    study.set_user_attr(SAMPLER, {"seed": seed, "startup_trials": startup_trials, "points": list(points)})
    return LossAwareTpe(
        study=study,
        space=distributions(space),
        seed=seed,
        startup_trials=startup_trials,
        points=tuple(points),
        verdicts=verdicts,
    )


def reopened(study: optuna.Study) -> LossAwareTpe | None:
    """The sampler a study was drawn by, from what it keeps (None: a study from before it kept that), over
    the distributions its trials were asked with."""
    kept = study.user_attrs.get(SAMPLER)
    if kept is None:
        return None
    space: dict[str, BaseDistribution] = {}
    for trial in study.get_trials(deepcopy=False):
        space.update(trial.distributions)
    points = tuple(kept["points"])
    return LossAwareTpe(
        study=study, space=space, seed=kept["seed"], startup_trials=kept["startup_trials"], points=points
    )


def mirror(
    tpe: LossAwareTpe,
    trials: Sequence[FrozenTrial],
    running: tuple[int, ...],
    constraints: dict[int, float],
    violation: Callable[[dict[str, Any]], float | None] = lambda config: None,
) -> Draw:
    """The mirror of `trials` (those numbered in `running` as running), seeded with their count."""
    sampler = optuna.samplers.TPESampler(
        seed=tpe.seed + len(trials), n_startup_trials=tpe.startup_trials, constant_liar=True
    )
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for trial in trials:
        state = TrialState.RUNNING if trial.number in running else trial.state
        if state in (TrialState.COMPLETE, TrialState.RUNNING):
            study.add_trial(_copy(trial, state, tpe.space, constraints.get(trial.number)))
    taken = {freeze(t.params) for t in trials if t.state != TrialState.FAIL or t.number in running}
    for point in tpe.points:
        if freeze(point) not in taken:
            study.enqueue_trial(dict(point), skip_if_exists=True)
    return Draw(study, len(trials), running, constraints, violation)


def replayed(tpe: LossAwareTpe, normalize: Callable = dict) -> list[bool]:
    """Per proposal of `tpe.study` in its order, whether a fresh draw from what it was drawn from (its
    `DRAWN` record: the study's trials then, its running ones, the constraints) proposes it again, repeats
    answered as the searcher answers them. True for each one while the rule and the seed are unchanged."""
    trials = tpe.study.get_trials(deepcopy=False)
    same = []
    for trial in (t for t in trials if DRAWN in t.user_attrs):
        drawn = trial.user_attrs[DRAWN]
        then, running = trials[: drawn["trials"]], tuple(drawn["running"])
        constraints = {int(k): v for k, v in drawn["constraints"].items()}
        in_draw = [t for t in trials[drawn["trials"] : trial.number] if REFUSED in t.user_attrs]
        known = {freeze(t.params): constraints[t.number] for t in then if t.number in constraints}
        known.update((freeze(t.params), t.constraints[CONSTRAINT]) for t in in_draw if t.constraints)
        draw = mirror(tpe, then, running, constraints, _lookup(known))
        points = {freeze(p) for p in tpe.points}
        answer = _answers(then, running, {freeze(t.params) for t in in_draw}, points)
        same.append(draw.first_new(tpe.space, normalize, answer) == normalize(trial.params))
    return same


def _lookup(known: dict[Hashable, float]) -> Callable[[dict[str, Any]], float | None]:
    """The constraints a replayed draw was told, by config."""
    return lambda config: known.get(freeze(config))


def held_back(
    config: dict[str, Any], running: Sequence[dict[str, Any]], ran: Sequence[dict[str, Any]]
) -> bool:
    """Whether a proposal waits for a scout: for a knob of SCOUTED, its value has no finished run yet and a
    run of that value is in flight. On an H100 (nanoGPT, 2026-12-07) five of the screen's six places held
    `max-autotune-no-cudagraphs` proposals still autotuning when its 150 s ended: 5 of 24 trials finished."""
    for knob in SCOUTED:
        if knob not in config or any(c.get(knob) == config[knob] for c in ran):
            continue
        if any(c.get(knob) == config[knob] for c in running):
            return True
    return False


def _answers(
    trials: Sequence[FrozenTrial], running: tuple[int, ...], refused: set[Hashable], points: set[Hashable]
) -> Answer:
    """How the searcher answered repeats then: a measured config its value, one refused in that draw measured
    nothing, a running one failed, and so was one held back for a scout (`held_back`; start points never)."""
    measured: dict[Hashable, float] = {}
    for t in trials:
        if t.state == TrialState.COMPLETE and t.number not in running:
            key = freeze(t.params)
            measured[key] = max(float(t.value or 0.0), measured.get(key, float(t.value or 0.0)))
    busy = [dict(t.params) for t in trials if t.number in running]
    ran = [dict(t.params) for t in trials if ran_then(t, running)]

    def answer(config: dict[str, Any]) -> float | TrialState | None:
        key = freeze(config)
        if key in measured:
            return measured[key]
        if key in refused:
            return 0.0
        if key in {freeze(c) for c in busy} or (key not in points and held_back(config, busy, ran)):
            return TrialState.FAIL
        return None

    return answer


def ran_then(trial: FrozenTrial, running: tuple[int, ...] = ()) -> bool:
    """Whether a trial's run had finished (ok, failed or crashed; not refused, which never ran)."""
    done = trial.state in (TrialState.COMPLETE, TrialState.FAIL) and trial.number not in running
    return done and REFUSED not in trial.user_attrs


def _copy(
    trial: FrozenTrial, state: TrialState, space: dict[str, BaseDistribution], constraint: float | None
) -> FrozenTrial:
    """The trial for the mirror: its params, its value once finished, its constraint where its loss is known."""
    return create_trial(
        state=state,
        value=trial.value if state == TrialState.COMPLETE else None,
        params=dict(trial.params),
        distributions={name: space.get(name, dist) for name, dist in trial.distributions.items()},
        constraints={CONSTRAINT: constraint} if constraint is not None else None,
    )
