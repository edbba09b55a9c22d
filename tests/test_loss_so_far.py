"""The loss runs beside the screen read as verdicts while it goes on (tuner/measure/loss_so_far.py), on real
Ray tasks of the toy workload: nothing until the baseline's run has ended, then the limit its loss sets and
the verdict of every loss run ahead that has ended, the ones from before a resume included."""

from __future__ import annotations

import math

from toy_workload import TOY

from tests.test_run_scheduler import run_scheduler
from trainables.config import make_config
from trainables.spec import TrialSpec
from tuner.config import QualitySection
from tuner.measure.baseline import BaselineLoss
from tuner.measure.loss_so_far import LossSoFar
from tuner.rules.horizon import LossHorizon
from tuner.runs.ahead import RunsAhead
from tuner.runs.request import Role, RunRequest
from tuner.runs.shapes import RunShapes


def test_the_verdicts_wait_for_the_baseline_then_judge_each_run_ahead_as_it_ends(tmp_path, shared_cpu_ray):
    base = make_config(TOY)
    shapes = RunShapes(base, 4, LossHorizon(planned_tokens=base.tokens, tokens=base.tokens, step_tokens=1))
    runs = run_scheduler(tmp_path)
    notices: list[str] = []
    rule = BaselineLoss(shapes, QualitySection(tolerance=0.0, mode="absolute"), notices.append)
    beside = runs.start(RunRequest(TrialSpec.of(TOY), Role.BESIDE), "baseline-loss", {})
    ahead = RunsAhead(
        scheduler=runs,
        plan=lambda rows: [],
        key_of=lambda knobs: tuple(sorted(knobs.items())),
        limit=2,
        at_once=1,
    )
    so_far = LossSoFar(rule, runs, [beside], ahead)
    assert so_far() is None, "the baseline's run is still training: no limit yet"
    beside.wait(120)
    knobs = {"lr": base.lr * 10}
    spec = TrialSpec.of({**TOY, **knobs}, knobs=knobs, screen_id="screen-3")
    ahead._start(RunRequest(spec, Role.AHEAD))
    first = so_far()
    metrics, _ = beside.result()
    assert first is not None and math.isclose(first.limit.limit, metrics["val_loss"])
    assert first.violation({}) == 0.0, "the baseline's own key, judged by its own loss"
    assert first.violation(knobs) is None, "its run ahead still trains"
    ahead.runs[ahead._key(RunRequest(spec, Role.AHEAD))].task.wait(120)
    judged = so_far().violation(knobs)
    run_metrics, _ = ahead.runs[ahead._key(RunRequest(spec, Role.AHEAD))].task.result()
    assert math.isclose(judged, run_metrics["val_loss"] - metrics["val_loss"])
    # taken by a round (its row in the ledger), and read back after a resume by a fresh scheduler: the same
    ahead.loss_row(RunRequest(spec, Role.AHEAD))
    resumed = RunsAhead(
        scheduler=run_scheduler(tmp_path), plan=lambda rows: [], key_of=ahead.key_of, limit=2, at_once=1
    )
    assert math.isclose(LossSoFar(rule, runs, [beside], resumed)().violation(knobs), judged)
