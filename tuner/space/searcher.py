"""The screen's Ray Tune searcher: proposals from the loss-aware TPE (tuner/space/sampler.py), never a config
the screen has measured, is measuring, or found cannot fit.

TPE proposes the same point again once it believes it is good, and on a GPU each such trial costs a compile.
A repeat is answered on the proposal's own draw (tuner/space/sampler.py:Draw) at no cost: with the measured
value for a measured config, as failed for one still running; and TPE is asked again. When it keeps
repeating itself the space is exhausted and the screen ends early (`exhausted`).

With a `BatchFit` (tuner/space/batch_fit.py) a proposal is first put in its one spelling (a micro_batch of at
least the batch is None), so two spellings of one config are one, and a config that cannot run (a
micro_batch below its batch that does not divide it) or whose forward batch the batch probe found cannot fit
is refused before it runs, with its reason in one line, and kept in the study as measuring nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from optuna.trial import TrialState
from ray.tune.search import Searcher

from trainables.common.progress import log
from tuner.space.batch_fit import BatchFit
from tuner.space.knobs import freeze
from tuner.space.sampler import LossAwareTpe, held_back, ran_then


class ScreenSearcher(Searcher):
    def __init__(
        self,
        tpe: LossAwareTpe,
        measured: dict[Any, float] | None = None,
        fit: BatchFit | None = None,
        metric: str = "tokens_per_s",
    ):
        super().__init__(metric=metric, mode="max")
        self.tpe, self.fit = tpe, fit
        # Asked before each proposal; False: nothing new now (Tune asks again), e.g. too late to finish one.
        self.may_propose: Callable[[], bool] | None = None
        self.measured: dict[Hashable, float] = {}  # frozen config -> metric (the ledger's, then the study's)
        for key, value in [*(measured or {}).items(), *tpe.measured().items()]:
            key = self._key(dict(key))
            self.measured[key] = max(value, self.measured.get(key, value))
        self.refused: dict[Hashable, str] = {}  # frozen config -> why it cannot fit
        self.running: dict[str, tuple] = {}  # Tune trial id -> frozen config
        self.numbers: dict[str, int] = {}  # Tune trial id -> its trial number in the study
        self.answered = 0  # repeats answered without a run
        self.waited = False  # the last draw held a proposal back for a scout
        self.waiting_since: tuple | None = (
            None  # the runs in flight and finished when a draw found only those
        )
        self.points = {self._key(dict(p)) for p in tpe.points}  # start points: never held back for a scout
        # configs whose runs have finished (not refused ones): a scouted knob's value is measured once one has
        self.ran: set[tuple] = {self._key(dict(k)) for k in (measured or {})} | {
            self._key(t.params) for t in tpe.study.get_trials(deepcopy=False) if ran_then(t)
        }
        self.exhausted = False

    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        return True  # the space is the sampler's (tuner/space/sampler.py:distributions)

    # Ray's searchers answer Searcher.FINISHED (a str) when done, by Tune's own contract; its annotation omits it
    def suggest(self, trial_id: str) -> dict | str | None:  # type: ignore[override]
        if self.may_propose is not None and not self.may_propose():
            return None
        now = (frozenset(self.running.values()), len(self.ran))
        if now == self.waiting_since:
            return None  # everything TPE proposed waited for a scout, and no run has started or ended since
        draw = self.tpe.draw()
        answer = lambda config: self._answer(config, draw.violation(config))
        self.waited = False
        config = draw.first_new(self.tpe.space, self._normalized, answer)
        if config is None and self.waited:
            self.waiting_since = now  # nothing now: Tune asks again, and a scout's end frees its value
            return None
        if config is None:
            self.exhausted = True
            return Searcher.FINISHED
        self.numbers[trial_id] = self.tpe.start(config, draw)
        self.running[trial_id] = freeze(config)
        return config

    def _normalized(self, params: dict[str, Any]) -> dict[str, Any]:
        return self.fit.normalized(params) if self.fit else dict(params)

    def _answer(self, config: dict[str, Any], over: float | None) -> float | TrialState | None:
        """A repeat's answer (its measured value; 0 for one that cannot fit or whose loss cannot pass, `over`
        the limit by the loss runs so far; failed while it runs), or None: a config to run."""
        key = freeze(config)
        if key in self.measured:
            self.answered += 1
            return self.measured[key]
        if self._refuses(key, config, over):
            return 0.0
        if key in self.running.values():
            return TrialState.FAIL
        if key not in self.points and self._held_back(config):
            self.waited = True
            return TrialState.FAIL
        return None

    def _held_back(self, config: dict[str, Any]) -> bool:
        """Whether it waits for the scout of a costly compile mode or kernel set (sampler.held_back)."""
        running = [dict(key) for key in self.running.values()]  # frozen configs: (knob, value) pairs
        return held_back(config, running, [dict(key) for key in self.ran])

    def _key(self, config: dict[str, Any]) -> tuple:
        """The config's frozen form in its one spelling: (knob, value) pairs."""
        return freeze(self._normalized(config))

    def _refuses(self, key: Hashable, config: dict[str, Any], over: float | None) -> bool:
        """Whether `config` cannot fit, or its loss cannot pass by the loss runs so far (timing it could not
        change the answer); the first time, says why and keeps it as measuring nothing."""
        why = self.fit.refusal(config) if self.fit else None
        if why is None and over is not None and over > 0:
            knobs = " ".join(f"{k}={v}" for k, v in config.items())
            why = f"not timed: {knobs}: its loss cannot pass ({over:+.4f} over the limit by the loss runs so far)"
        if why is None:
            return False
        self.refused[key], self.measured[key] = why, 0.0
        self.tpe.refuse(config, why, over if over is not None and over > 0 else None)
        log(f"[screen] {why}")
        return True

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        key, number = self.running.pop(trial_id, None), self.numbers.pop(trial_id, None)
        value = (result or {}).get(self.metric)
        value = float(value) if isinstance(value, int | float) and not error else None
        if key is not None:
            self.measured[key] = value or 0.0
            self.ran.add(key)
        if number is not None:  # a crashed run measured nothing: failed in the study, which TPE ignores
            self.tpe.finish(number, None if error else (value or 0.0))

    # Ray Tune snapshots searchers; the ledger and the Optuna study are this search's record instead.
    def save(self, checkpoint_path: str) -> None:
        pass

    def restore(self, checkpoint_path: str) -> None:
        pass

    def get_state(self) -> dict:
        return {}

    def set_state(self, state: dict) -> None:
        pass
