"""The baseline's loss run borrows the execution of its twin: the fastest screened run with its loss knobs."""

from __future__ import annotations

from types import SimpleNamespace

from factories import make_row

from tuner.phases.baseline import loss_case, twins

BASE = {"batch_size": 8, "precision": "fp32", "compile": "none", "loader": "dataloader", "lr_scaling": "none"}


def ctx():
    return SimpleNamespace(base=dict(BASE), notices=[], notice=lambda msg: None)


def test_a_twin_the_early_stopper_stopped_after_steady_steps_still_lends_its_execution():
    screen = [
        make_row("screen-0", config={"batch_size": 64, "compile": "reduce-overhead"}, tokens_per_s=700e3),
        make_row("screen-1", config={"compile": "reduce-overhead"}, status="stopped", tokens_per_s=97e3),
        make_row("screen-2", config={"loader": "device"}, tokens_per_s=14e3),
    ]
    case, twin = loss_case(ctx(), screen)
    assert twin.id == "screen-1"
    assert case["compile"] == "reduce-overhead" and case["batch_size"] == 8


def test_runs_that_failed_or_never_reached_steady_steps_are_no_twins():
    screen = [
        make_row("screen-0", config={"compile": "max-autotune"}, status="timeout", tokens_per_s=None),
        make_row("screen-1", config={"compile": "reduce-overhead"}, status="stopped", tokens_per_s=0.0),
        make_row("screen-2", config={"compile": "default"}, status="error", tokens_per_s=0.0),
        make_row("screen-3", config={"loader": "device"}, tokens_per_s=14e3),
    ]
    assert [t.id for t in twins(ctx(), screen).values()] == ["screen-3"]
    case, twin = loss_case(ctx(), screen)
    assert twin.id == "screen-3" and case["compile"] == "none"


def test_without_a_twin_the_baseline_trains_as_configured():
    notes = []
    c = SimpleNamespace(base=dict(BASE), notice=notes.append)
    case, twin = loss_case(c, [make_row("screen-0", config={"batch_size": 64}, tokens_per_s=1e5)])
    assert twin is None and case["compile"] == "none" and notes
