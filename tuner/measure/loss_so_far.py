"""The loss runs beside the screen, read as verdicts while it goes on: once the baseline's runs there have all
ended, the loss limit they set, and the verdict of every loss run trained ahead of the loss check that has
ended since (tuner/decide/verdicts.py). The screen's sampler asks for them at each proposal
(tuner/space/sampler.py), so what a loss run learns (this batch at this lr fails) reaches it while the screen
still proposes; the loss check later records the same runs' rows (tuner/phases/loss_check.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tuner.decide.verdicts import LossVerdicts
from tuner.measure.baseline import BaselineLoss, kept_rows, loss_limit_of
from tuner.rules.loss_limit import LossLimit
from tuner.runs.ahead import RunsAhead
from tuner.runs.scheduler import RunScheduler
from tuner.runs.tasks import LossSeen, TaskRun


@dataclass
class LossSoFar:
    """The verdicts the runs beside the screen give so far: `besides`, the baseline's (its first seed's,
    then its others'), `ahead`, the candidates' (None: none train ahead; set once they are planned, since
    their plan reads these verdicts too: tuner/phases/loss_check.py:start_ahead)."""

    rule: BaselineLoss
    scheduler: RunScheduler
    besides: Sequence[TaskRun]
    ahead: RunsAhead | None = None

    def __call__(self) -> LossVerdicts | None:
        """None until the baseline's runs beside the screen have all ended and its own trained."""
        baseline = [self._seen(run) for run in self.besides]
        if not baseline or any(seen is None for seen in baseline):
            return None
        first, *others = [seen for seen in baseline if seen is not None]
        if first.status != "ok" or first.val_loss is None:
            return None
        limit: LossLimit = loss_limit_of(self.rule.quality, self.rule.shapes.horizon, first, others)
        runs = [({}, first), *((seen.knobs, seen) for seen in self._ahead())]
        return LossVerdicts.of(self.rule.shapes.base.model_dump(), limit, runs)

    def _seen(self, run: TaskRun) -> LossSeen | None:
        if run.ref is None:  # its row was recorded before a resume
            kept = kept_rows(self.scheduler, run.spec.train.seed)
            return LossSeen.of_row(kept[0]) if kept else None
        return LossSeen.of(run)

    def _ahead(self) -> list[LossSeen]:
        return self.ahead.finished() if self.ahead is not None else []
