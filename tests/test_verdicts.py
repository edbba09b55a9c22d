"""What the loss runs so far say of configs that trained none of their own (tuner/decide/verdicts.py), how
the loss check's plan takes the ones they rule out out of its queue, and the advice a user gets where larger
batches failed at one lr. Pure functions: no Ray."""

from __future__ import annotations

import math

from tests.factories import make_row
from tests.test_loss_plan import BASE, BF16, LOOSE, row
from tuner.config import QualitySection
from tuner.decide.loss_plan import LossPlan
from tuner.decide.verdicts import LossVerdicts, lr_scaling_advice

LIMIT = QualitySection(tolerance=0.05).loss_limit(1.60)  # 1.65


def loss_run(tid: str, val_loss: float | None, status: str = "ok", **config):
    return make_row(tid, "loss_check_0", config, val_loss=val_loss, status=status)


def verdicts(*runs) -> LossVerdicts:
    return LossVerdicts.of(BASE, LIMIT, [(r.config, r) for r in runs])


def test_a_config_takes_its_own_keys_verdict_whatever_its_execution():
    v = verdicts(loss_run("a", 1.70, batch_size=128, **BF16), loss_run("b", 1.62, **BF16))
    assert math.isclose(v.violation({"batch_size": 128, **BF16, "compile": "reduce-overhead"}), 0.05)
    assert math.isclose(v.violation({**BF16, "fused_adamw": True}), -0.03)  # passes
    assert v.violation({"batch_size": 32, **BF16}) is None, "a smaller batch: nothing known"


def test_a_failure_rules_out_larger_batches_at_its_peak_lr_and_nothing_else():
    v = verdicts(loss_run("b128", 1.72, batch_size=128, **BF16))
    assert math.isclose(v.violation({"batch_size": 256, **BF16}), 0.07), "fewer steps at the same lr"
    assert v.fails({"batch_size": 256, **BF16, "compile": "reduce-overhead"})
    # a scaled lr at the larger batch is another peak lr; another precision another loss key; a smaller
    # batch trains more steps: none of them is ruled out
    assert v.violation({"batch_size": 256, "lr_scaling": "linear", **BF16}) is None
    assert v.violation({"batch_size": 256, "precision": "fp16"}) is None
    assert v.violation({"batch_size": 64, **BF16}) is None
    # a pass rules nothing out, and a run that says nothing of the loss judges nothing
    v = verdicts(loss_run("ok", 1.61, batch_size=128, **BF16), loss_run("oom", None, "oom", batch_size=32))
    assert v.violation({"batch_size": 256, **BF16}) is None and v.violation({"batch_size": 32}) is None
    assert (
        verdicts(loss_run("nan", None, "nan", batch_size=128, **BF16)).violation({"batch_size": 256, **BF16})
        == math.inf
    )


def test_the_loss_check_spends_no_run_on_a_config_a_failure_ruled_out():
    screen = [
        row("b256", 3_300_000.0, batch_size=256, **BF16),
        row("b256-graphs", 3_250_000.0, batch_size=256, precision="bf16", compile="reduce-overhead"),
        row("b128", 3_200_000.0, batch_size=128, **BF16),
        row("b64", 2_400_000.0, **BF16),
        row("b32", 1_500_000.0, batch_size=32, **BF16),
    ]
    plan = LossPlan.of(screen, BASE, LOOSE)
    (first,) = plan.next_round(1)
    assert first.id == "b64", "the baseline's batch and lr first"
    plan.record(first, False)
    # b128's run ahead ended over the limit: b128 stays (the round takes its row), b256 is ruled out
    plan.judge(verdicts(loss_run("b128", 1.71, batch_size=128, **BF16)))
    assert [c.id for c in plan.queue] == ["b128", "b32"] and [c.id for c in plan.ruled_out] == ["b256"]
    plan.judge(verdicts(loss_run("b64", 1.70, **BF16)))
    assert [c.id for c in plan.queue] == ["b32"], "every larger batch at its lr could only fail"
    assert [c.id for c in plan.ruled_out] == ["b256", "b128"]
    outcome = plan.outcome()
    assert outcome.ruled_out == ["b256", "b256-graphs", "b128"], "every screen row of their groups"
    assert outcome.unchecked_faster == ["b32"], "ruled out is not unchecked: only b32 waits for its run"
    assert [p.id for p in plan.next_round(2)] == ["b32"]


def test_the_plan_names_what_a_user_can_add_where_larger_batches_failed_at_one_lr():
    v = verdicts(
        loss_run("b128", 1.72, batch_size=128, **BF16),
        loss_run("b256", 1.80, batch_size=256, **BF16),
        loss_run("b32", 1.90, batch_size=32, **BF16),  # a smaller batch failing says nothing of scaling
    )
    advice = lr_scaling_advice(v, {"batch_size": [32, 64, 128, 256]})
    assert advice is not None and advice.startswith("effective batch 128, 256 failed the loss limit at the")
    assert "add `lr_scaling: [none, sqrt, linear]`" in advice
    assert lr_scaling_advice(v, {"batch_size": [32, 64], "lr_scaling": ["none", "sqrt"]}) is None
    assert lr_scaling_advice(verdicts(loss_run("b32", 1.90, batch_size=32, **BF16)), {}) is None


def test_the_recipes_group_at_the_baselines_batch_and_lr_is_queued_once():
    """On an H100 the recipe (bf16, compile default, fused AdamW) shared its loss group with the fastest
    config at the baseline's batch and lr (bf16 under CUDA graphs): the plan queued that group first and
    again as the recipe's, and the loss check counted its one run twice (summary.json listed it twice)."""
    screen = [
        row("graphs", 1_640_000.0, precision="bf16", compile="reduce-overhead", lr_scaling="sqrt"),
        row("recipe", 800_000.0, precision="bf16", compile="default", fused_adamw=True),
        row("b128", 2_800_000.0, batch_size=128, precision="fp16", compile="reduce-overhead"),
    ]
    plan = LossPlan.of(screen, BASE, LOOSE, reference=frozenset({"recipe"}))
    assert [c.id for c in plan.queue] == ["graphs", "b128"]
    assert [p.id for p in plan.next_round(3)] == ["graphs", "b128"] and plan.runs == 2
