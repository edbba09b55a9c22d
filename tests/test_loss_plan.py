"""The loss check's plan (tuner/decide/loss_plan.py): which candidates train, in what order, when it stops and how it
says so; and issue 43's recorded nanoGPT search replayed through it. Pure functions: no Ray."""

from __future__ import annotations

import json
import math

import pytest

from tests.factories import make_row, search_context
from tests.shared_files import shared_file
from tuner.config import QualitySection, load_search_config
from tuner.decide.loss_plan import Limits, LossCheck, LossPlan, baseline_speed, ordered
from tuner.decide.select import loss_check_candidates, with_feasibility
from tuner.phases import loss_check
from tuner.pipeline import loss_check_inputs, run_scheduler
from tuner.report.markdown import render_markdown
from tuner.space.knobs import loss_key
from tuner.state.loss_outcome import LossCheckOutcome
from tuner.state.records import Summary

BASE = {"batch_size": 64, "grad_accum": 1, "lr": 1e-3, "lr_scaling": "none", "lr_base_batch": 64}
BASE |= {"precision": "fp32", "compile": "none", "fused_adamw": False, "tokens": 10_240_000}
LOOSE = Limits(runs=8, time_s=math.inf, tokens=10_240_000, remeasure_top=2)


def row(tid: str, tps: float, warmup_s: float = 10.0, status: str = "ok", **config):
    return make_row(tid, "screen", config, tokens_per_s=tps, warmup_s=warmup_s, status=status)


BF16 = {"precision": "bf16", "compile": "default"}
SCREEN = [
    row("b256-bf16", 3_300_000.0, batch_size=256, lr_scaling="linear", **BF16),
    row("b128-bf16", 3_200_000.0, batch_size=128, lr_scaling="sqrt", **BF16),
    row("b256-fp16", 2_600_000.0, batch_size=256, lr_scaling="linear", precision="fp16"),
    row("b64-bf16", 2_400_000.0, **BF16),
    row("b64-fp16", 1_800_000.0, precision="fp16"),
    row("b32-fp32", 450_000.0, batch_size=32, lr_scaling="linear"),
]


def ids(picks) -> list[str]:
    return [p.id for p in picks]


def run_plan(plan: LossPlan, passes: set[str], take: int = 1) -> list[str]:
    """Rounds of `take` until the plan ends; a candidate passes when its id is in `passes`."""
    checked: list[str] = []
    while plan.ended_by is None:
        for pick in plan.next_round(take):
            checked.append(pick.id)
            plan.record(pick, pick.id in passes)
    return checked


def test_the_baselines_batch_and_lr_go_first_then_round_robin_over_batch_and_lr():
    order = ordered(loss_check_candidates(SCREEN, BASE, len(SCREEN)), BASE)
    # b64-bf16 at the baseline's (64, 1e-3) first; then each (batch, lr) point's fastest, points by their
    # fastest (256 at 4e-3, 128 at 1.4e-3, 32 at 5e-4; 64's first is taken); then each point's second
    assert ids(order) == ["b64-bf16", "b256-bf16", "b128-bf16", "b32-fp32", "b256-fp16", "b64-fp16"]


def test_one_loss_run_for_configs_that_train_the_same_numbers():
    # lr_scaling sqrt at the baseline's batch trains at the baseline's lr: one key with the unscaled one
    screen = [row("sqrt", 2_500_000.0, lr_scaling="sqrt", **BF16), row("none", 2_100_000.0, **BF16)]
    picks = loss_check_candidates(screen, BASE, 2)
    assert [(p.id, p.covers) for p in picks] == [("sqrt", ("sqrt", "none"))]


def test_never_a_run_for_a_config_slower_than_the_baseline_screened():
    screen = [*SCREEN, row("baseline-point", 500_000.0)]  # no knob changed: the baseline's own screen row
    assert baseline_speed(screen, BASE) == 500_000.0
    plan = LossPlan.of(screen, BASE, LOOSE)
    assert "b32-fp32" not in ids(plan.queue)
    assert "b32-fp32" not in run_plan(plan, passes=set(), take=4), "not even a spare, with budget to spare"
    assert plan.ended_by == "all_checked"


def test_never_a_run_for_a_config_slower_than_one_already_passing():
    plan = LossPlan.of(SCREEN, BASE, LOOSE)
    assert run_plan(plan, passes={"b64-bf16"}) == ["b64-bf16", "b256-bf16", "b128-bf16", "b256-fp16"]
    # the baseline's own loss group passes without a run: nothing slower than its fastest is checked
    twin = row("twin", 2_000_000.0, compile="default", fused_adamw=True)
    assert ids(LossPlan.of([*SCREEN, twin], BASE, LOOSE).queue) == [
        "b64-bf16",
        "b256-bf16",
        "b128-bf16",
        "b256-fp16",
    ]


def test_a_failed_point_waits_behind_other_points():
    plan = LossPlan.of(SCREEN, BASE, LOOSE)
    first = plan.next_round(1)
    plan.record(first[0], False)  # b64-bf16 failed at (64, 1e-3)
    plan.record(plan.next_round(1)[0], False)  # b256-bf16 failed at (256, 4e-3)
    # round robin would give b256-fp16 and b64-fp16 before b128 and b32: the failed points' go last
    assert ids(plan.next_round(2)) == ["b128-bf16", "b32-fp32"]
    # and a round takes no candidate the re-measure (top 2) could not time were its faster picks to pass
    assert ids(plan.next_round(4)) == ["b256-fp16", "b64-fp16"]
    plan = LossPlan.of(SCREEN, BASE, LOOSE)
    assert ids(plan.next_round(6)) == ["b64-bf16", "b256-bf16", "b128-bf16"]  # the rest wait for failures


def test_the_time_budget_goes_past_the_cap_while_nothing_passed():
    # each run: 10.24M tokens at its screened speed + 10 s warm-up (b256-bf16 13.1 s, b128 13.2 s, ...)
    plan = LossPlan.of(SCREEN, BASE, Limits(runs=2, time_s=45.0, tokens=10_240_000, remeasure_top=2))
    assert run_plan(plan, passes=set()) == ["b64-bf16", "b256-bf16", "b128-bf16"]
    assert plan.ended_by == "loss_check_time"
    assert plan.runs == 3 and plan.spent_s == pytest.approx(
        3 * 10 + sum(10_240_000 / s for s in (2.4e6, 3.3e6, 3.2e6))
    )


def test_the_cap_holds_once_a_config_faster_than_the_baseline_passed():
    plan = LossPlan.of(SCREEN, BASE, Limits(runs=2, time_s=1e9, tokens=10_240_000, remeasure_top=2))
    assert run_plan(plan, passes={"b64-bf16"}) == ["b64-bf16", "b256-bf16"]
    assert plan.ended_by == "max_loss_checks"
    outcome = plan.outcome()
    assert outcome.unchecked_faster == ["b128-bf16", "b256-fp16"]  # faster than b64-bf16, never checked
    line = outcome.line()
    assert line.startswith("the loss check ended at its cap of 2 runs (search.max_loss_checks) after 2 runs")
    assert line.endswith("unchecked: b128-bf16, b256-fp16")


def test_the_outcome_reaches_summary_json_and_one_line_of_the_report():
    outcome = LossCheckOutcome(
        ended_by="loss_check_time", runs=5, time_budget_s=120.0, unchecked_faster=["s-3"]
    )
    summary = Summary(loss_check=outcome)
    assert Summary.model_validate_json(summary.model_dump_json()).loss_check == outcome
    assert (
        "Note: the loss check ended at its time budget of 120 s (search.loss_check_time)"
        in render_markdown(summary)
    )
    done = LossCheckOutcome(ended_by="all_checked", runs=2)
    assert done.line() is None and "Note: the loss check" not in render_markdown(Summary(loss_check=done))


def test_the_phase_record_reads_a_state_json_list_of_before():
    rows = [make_row("baseline", "baseline"), make_row("seed", "baseline"), make_row("lc", "loss_check_1")]
    older = LossCheck.model_validate([r.model_dump(mode="json") for r in rows])
    assert (older.baseline.id, ids(older.seeds), ids(older.candidates), older.outcome) == (
        "baseline",
        ["seed"],
        ["lc"],
        None,
    )
    assert older.rows == rows


def test_the_default_time_budget_is_the_baselines_loss_run_at_least_two_minutes(tmp_path):
    def checking_of(cfg):
        ctx = search_context(cfg, tmp_path, cluster_cpus=2)
        return loss_check_inputs(ctx, run_scheduler(ctx))

    checking = checking_of(load_search_config("configs/smoke.yaml", []))
    assert loss_check.limits(checking).time_s == loss_check.MIN_LOSS_CHECK_S
    assert loss_check.limits(checking, make_row("baseline", "baseline", wall_s=300.0)).time_s == 300.0
    said = load_search_config("configs/smoke.yaml", ["search.loss_check_time=5m", "search.max_loss_checks=3"])
    checking = checking_of(said)
    assert (
        loss_check.limits(checking, make_row("b", "baseline", wall_s=900.0)).time_s,
        loss_check.limits(checking).runs,
    ) == (
        300.0,
        3,
    )


# --- issue 43's recorded search, replayed ------------------------------------------------------------------

CASE = ("cases", "nanogpt-h200-exit3", "summary.json")  # under ../shared (tests/shared_files.py)
BETTER_BY = 0.0085  # batch-64 bf16 at the baseline's lr passed by this in an earlier search of the same model


def _recorded():
    summary = json.loads(shared_file(*CASE).read_text())
    return summary, Summary.model_validate(summary).trials


def _oracle(summary: dict, trials, base: dict):
    """A pick's val loss: the recorded loss run's of its loss key; at the baseline's batch and lr the
    baseline's + BETTER_BY; anything else the search never trained is the test's to not need."""
    recorded = {loss_key(t.config, base): t.val_loss for t in trials if t.phase.startswith("loss_check")}
    baseline_loss, home = summary["baseline"]["val_loss"], loss_key({}, base)

    def val_loss(pick) -> float:
        key = loss_key(pick.config, base)
        if key in recorded:
            return recorded[key]
        if all(pick.config.get(k, base[k]) == base[k] for k in ("batch_size", "grad_accum", "lr")) and (
            loss_key({**pick.config, "precision": base["precision"]}, base) == home
        ):
            return baseline_loss + BETTER_BY  # batch 64 at the baseline's peak lr, bf16 or fp16
        if pick.config["batch_size"] < base["batch_size"]:
            return baseline_loss  # batch 32 (never trained): slower than the answer either way
        raise AssertionError(f"the replay checked {pick.id}, which the recorded search never trained")

    return val_loss


@pytest.mark.parametrize("round_size", [1, 2, 3, 4])
@pytest.mark.parametrize("with_baseline_row", [False, True])
def test_the_recorded_nanogpt_search_answers_batch_64_bf16(round_size, with_baseline_row):
    summary, trials = _recorded()
    base = summary["baseline"]["config"]
    screen = [t for t in trials if t.phase == "screen"]
    if with_baseline_row:  # the start point named the baseline, at its re-measured speed
        screen.append(make_row("screen-base", config={}, tokens_per_s=summary["baseline"]["tokens_per_s"]))
    limit = QualitySection().loss_limit(summary["baseline"]["val_loss"])
    val_loss = _oracle(summary, trials, base)
    limits = Limits(runs=3, time_s=loss_check.MIN_LOSS_CHECK_S, tokens=base["tokens"], remeasure_top=2)
    plan, checked = LossPlan.of(screen, base, limits), []
    while plan.ended_by is None:
        for pick in plan.next_round(round_size):
            checked.append(make_row(f"loss-{pick.id}", "loss_check_1", pick.config, val_loss=val_loss(pick)))
            plan.record(pick, limit.verdict(checked[-1]))
    assert checked[0].config["batch_size"] == 64, "the baseline's batch and lr first"
    judged = with_feasibility(screen, checked, limit, baseline=base)
    answer = max((r for r in judged if r.feasible and r.status == "ok"), key=lambda r: r.tokens_per_s)
    assert (answer.config["batch_size"], answer.config["precision"]) == (64, "bf16")
    assert answer.tokens_per_s > 4 * summary["baseline"]["tokens_per_s"]
    assert len(checked) <= 3 or plan.ended_by == "loss_check_time"
    if with_baseline_row:
        assert "screen-0" not in {c.id.removeprefix("loss-") for c in checked}, "batch 32 fp32: slower"
    outcome = plan.outcome()
    assert outcome.ended_by == "max_loss_checks"
    assert outcome.unchecked_faster == ["screen-6"]  # batch 256 fp16: faster than the answer, over the cap
    assert "screen-6" in outcome.line()


def test_the_recorded_search_wants_no_run_ahead_slower_than_the_baseline():
    summary, trials = _recorded()
    base = summary["baseline"]["config"]
    screen = [t for t in trials if t.phase == "screen"]
    screen.append(make_row("screen-base", config={}, tokens_per_s=summary["baseline"]["tokens_per_s"]))
    ahead = LossPlan.of(screen, base, LOOSE).queue[:5]  # loss_check_top 4, and a spare
    assert ids(ahead)[0] == "screen-9" and "screen-0" not in ids(ahead)
