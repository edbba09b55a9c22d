"""A searcher wrapper that never hands Ray Tune a config the screen has already measured or is measuring.

TPE proposes the same point again once it believes it is good (three trials in a row of one config have
been seen), and on a GPU each such trial costs a compile. Here a repeat of a measured config is answered
to the searcher with the measured value at no cost, a repeat of one still running is told to the searcher
as failed (TPE ignores failed trials), and the searcher is asked again; when it keeps repeating itself the
space is exhausted and the screen ends early (`exhausted`).

With a `BatchFit` (tuner/space/batch_fit.py) a proposal is first put in its one spelling (a micro_batch of at least
the batch is None), so two spellings of one config are one, and a config that cannot run (a micro_batch
below its batch that does not divide it) or whose forward batch the batch probe found cannot fit is refused
before it runs, with its reason in one line: answered to the searcher as a config that measured nothing (as
a failed run is kept), at no cost.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ray.tune.search import Searcher

from trainables.progress import log
from tuner.space.batch_fit import BatchFit
from tuner.space.knobs import freeze

MAX_REPEATS = 50  # proposals in a row that repeat known configs before the space counts as exhausted


class DistinctConfigs(Searcher):
    def __init__(
        self, searcher: Searcher, measured: dict[Any, float] | None = None, fit: BatchFit | None = None
    ):
        super().__init__(metric=searcher.metric, mode=searcher.mode)
        self.searcher = searcher
        self.fit = fit
        # Asked before each proposal; False: nothing new now (Tune asks again), e.g. too late to finish one.
        self.may_propose: Callable[[], bool] | None = None
        self.measured: dict[Any, float] = {}  # frozen config -> metric
        for key, value in (measured or {}).items():  # a ledger from before one spelling keeps the best
            key = self._key(dict(key))
            self.measured[key] = max(value, self.measured.get(key, value))
        self.refused: dict[Any, str] = {}  # frozen config -> why it cannot fit
        self.running: dict[str, Any] = {}  # Tune trial id -> frozen config
        self.alias: dict[str, str] = {}  # Tune trial id -> the searcher's id for it
        self.answered = 0  # repeats answered without a run
        self.exhausted = False

    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        ok = self.searcher.set_search_properties(metric, mode, config, **spec)
        self._metric, self._mode = self.searcher.metric, self.searcher.mode
        return ok

    def set_max_concurrency(self, max_concurrent: int) -> bool:
        return self.searcher.set_max_concurrency(max_concurrent)

    def suggest(self, trial_id: str) -> dict | str | None:
        if self.may_propose is not None and not self.may_propose():
            return None
        for attempt in range(MAX_REPEATS):
            inner = trial_id if attempt == 0 else f"{trial_id}~{attempt}"
            config = self.searcher.suggest(inner)
            if config is None or config == Searcher.FINISHED:
                return config
            config = self.fit.normalized(config) if self.fit else config
            key = freeze(config)
            if key in self.measured:
                self.searcher.on_trial_complete(inner, result={self.metric: self.measured[key]})
                self.answered += 1
            elif self._refuses(key, config):
                self.searcher.on_trial_complete(inner, result={self.metric: 0.0})
            elif key in self.running.values():
                self.searcher.on_trial_complete(inner, error=True)
            else:
                self.alias[trial_id], self.running[trial_id] = inner, key
                return config
        self.exhausted = True
        return Searcher.FINISHED

    def _key(self, config: dict[str, Any]) -> Any:
        return freeze(self.fit.normalized(config) if self.fit else config)

    def _refuses(self, key: Any, config: dict[str, Any]) -> bool:
        """Whether `config` cannot fit; the first time, says why and keeps it as measuring nothing."""
        why = self.fit.refusal(config) if self.fit else None
        if why is None:
            return False
        self.refused[key], self.measured[key] = why, 0.0
        log(f"[screen] {why}")
        return True

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        self.searcher.on_trial_result(self.alias.get(trial_id, trial_id), result)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        key = self.running.pop(trial_id, None)
        if key is not None:
            value = (result or {}).get(self.metric)
            self.measured[key] = value if isinstance(value, int | float) and not error else 0.0
        self.searcher.on_trial_complete(self.alias.pop(trial_id, trial_id), result=result, error=error)

    # Ray Tune snapshots searchers; the ledger and the Optuna journal are this search's record instead.
    def save(self, checkpoint_path: str) -> None:
        pass

    def restore(self, checkpoint_path: str) -> None:
        pass

    def get_state(self) -> dict:
        return {}

    def set_state(self, state: dict) -> None:
        pass
