"""Selection rules on synthetic trial tables: loss-check grouping, feasibility propagation, the winner."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.factories import make_row
from trainables.common.exit_codes import Exit
from trainables.config import load_config
from tuner.config import QualitySection, load_search_config
from tuner.context import SearchContext
from tuner.decide.loss_plan import Limits, LossPlan
from tuner.decide.screen_outcome import ScreenOutcome, nothing_screened
from tuner.decide.select import (
    Selection,
    could_be_remeasured,
    finish_first,
    loss_check_candidates,
    pick_winner,
    spread,
    with_feasibility,
)
from tuner.phases import finish
from tuner.pipeline import finish_inputs
from tuner.space.knobs import knob_diff, loss_key, train_point
from tuner.state.hardware import Hardware
from tuner.state.records import BASELINE_ID, Finalist, LossLimit, Summary
from tuner.state.search_state import State

BASELINE = {
    "batch_size": 8,
    "grad_accum": 1,
    "lr": 3e-4,
    "precision": "fp32",
    "compile": "none",
    "kernels": "torch",
    "num_workers": 0,
    "model": {"d_model": 128, "n_layers": 8},
    "max_steps": None,
    "out_dir": None,
}
LIMIT = LossLimit(baseline_loss=1.50, tolerance=0.05, mode="absolute", limit=1.55)


def screen(tid: str, tps: float | None, status: str = "ok", **config):
    return make_row(tid, "screen", config, status=status, tokens_per_s=tps)


def check(tid: str, config: dict, val_loss: float, status: str = "ok"):
    return make_row(tid, "loss_check_0", config, status=status, val_loss=val_loss)


# --- loss_key / knob_diff / spread --------------------------------------------------------------------------


def test_loss_key_ignores_speed_knobs_and_fills_missing_from_baseline():
    assert loss_key({"compile": "default", "kernels": "fused", "num_workers": 4}, BASELINE) == loss_key(
        {}, BASELINE
    )
    assert loss_key({"batch_size": 8, "max_steps": 20, "out_dir": "/x"}, BASELINE) == loss_key({}, BASELINE)
    assert loss_key({"batch_size": 16}, BASELINE) != loss_key({}, BASELINE)
    assert loss_key({"precision": "bf16"}, BASELINE) != loss_key({}, BASELINE)
    # nested model overrides are compared by value, whatever their key order
    assert loss_key({"model": {"n_layers": 8, "d_model": 128}}, BASELINE) == loss_key({}, BASELINE)
    assert loss_key({"model": {"d_model": 64, "n_layers": 8}}, BASELINE) != loss_key({}, BASELINE)


def test_loss_key_compares_the_peak_lr_not_the_lr_labels():
    # issue 43's nanoGPT case: at the baseline's batch, lr_scaling sqrt and none train the same numbers
    base = {**BASELINE, "batch_size": 64, "lr": 1e-3, "lr_scaling": "none", "lr_base_batch": 64}
    bf16 = {"precision": "bf16", "compile": "default"}
    assert loss_key({**bf16, "lr_scaling": "sqrt"}, base) == loss_key(bf16, base)
    assert loss_key({"lr_scaling": "linear"}, base) == loss_key({}, base)  # the baseline's own group
    # the same peak lr written two ways: 5e-4 scaled linearly from batch 32 to 64 is 1e-3
    assert loss_key({"lr": 5e-4, "lr_scaling": "linear", "lr_base_batch": 32}, base) == loss_key({}, base)
    assert loss_key({"lr": 2.5e-4, "lr_scaling": "sqrt", "lr_base_batch": 4}, base) == loss_key({}, base)
    # away from the base batch the scaling changes the lr, and so the key
    assert loss_key({"batch_size": 128, "lr_scaling": "sqrt"}, base) != loss_key({"batch_size": 128}, base)
    assert loss_key({"grad_accum": 2, "lr_scaling": "linear"}, base) != loss_key({"grad_accum": 2}, base)
    assert loss_key({"lr": 2e-3}, base) != loss_key({}, base)
    assert train_point({"batch_size": 256, "lr_scaling": "linear"}, base) == (256, 4e-3)
    assert train_point({"grad_accum": 2, "lr_scaling": "sqrt", **bf16}, base) == (
        128,
        pytest.approx(2**0.5 * 1e-3),
    )


def test_loss_key_treats_unknown_fields_as_loss_relevant():
    assert loss_key({"mamba_lr_mult": 1.0}, BASELINE) != loss_key({"mamba_lr_mult": 2.0}, BASELINE)


def test_knob_diff_lists_changed_knobs_with_old_and_new():
    diff = knob_diff({"batch_size": 128, "precision": "fp32", "compile": "default"}, BASELINE)
    assert diff == {"batch_size": (8, 128), "compile": ("none", "default")}
    assert knob_diff({"lr": 0.0003}, BASELINE) == {}
    assert knob_diff({"fused_adamw": True}, BASELINE) == {"fused_adamw": (None, True)}


def test_spread_is_median_min_max_of_finite_values():
    assert spread([3.0, 1.0, 2.0, 10.0]) == (2.5, 1.0, 10.0)
    assert spread([5.0, math.nan, None]) == (5.0, 5.0, 5.0)
    with pytest.raises(ValueError):
        spread([math.nan])


# --- loss_check_candidates --------------------------------------------------------------------------------


def test_candidates_group_by_loss_key_and_keep_the_fastest_of_each():
    trials = [
        screen("a", 100.0, batch_size=64, compile="none"),
        screen("b", 300.0, batch_size=64, compile="default"),  # same loss key as a, faster
        screen("c", 250.0, batch_size=128),
        screen("d", 500.0, status="oom", batch_size=1024),
        screen("e", 200.0, precision="bf16"),
        screen("f", 50.0, batch_size=32),
    ]
    before = [t.model_copy(deep=True) for t in trials]
    out = loss_check_candidates(trials, BASELINE, top=2)
    assert [c.id for c in out] == ["b", "c"]
    assert all(c.inherits is None for c in out)
    assert sorted(out[0].covers) == ["a", "b"]
    assert out[0].config == {"batch_size": 64, "compile": "default"}
    assert trials == before  # the inputs stay untouched


def test_baseline_key_group_inherits_and_does_not_count_towards_top():
    trials = [
        screen("fast-speed-only", 900.0, compile="default", kernels="fused"),
        screen("slow-speed-only", 400.0, num_workers=4),
        screen("bigger", 600.0, batch_size=64),
        screen("bf16", 500.0, precision="bf16"),
    ]
    out = loss_check_candidates(trials, BASELINE, top=1)
    assert [(c.id, c.inherits) for c in out] == [("fast-speed-only", BASELINE_ID), ("bigger", None)]
    assert sorted(out[0].covers) == ["fast-speed-only", "slow-speed-only"]
    assert loss_check_candidates(trials, BASELINE, top=0) == [out[0]]


def test_candidates_skip_failed_and_stopped_trials():
    trials = [screen("x", 900.0, status="nan", lr=1e-2), screen("y", None, batch_size=64)]
    trials.append(screen("z", 10.0, status="stopped", batch_size=16))
    assert loss_check_candidates(trials, BASELINE, top=4) == []


def test_a_candidate_is_in_reach_until_enough_distinct_passed_configs_screened_faster():
    # Run G's shape (H200, 2026-11-26): three groups passed in round 0 with four configs faster than the
    # next candidate, so a second round for it (141 s there) could not change what the re-measure times.
    trials = [
        screen("ro-lr6-device", 580.0, batch_size=32, lr=6e-4, compile="reduce-overhead", loader="device"),
        screen("ro-lr6", 524.0, batch_size=32, lr=6e-4, compile="reduce-overhead"),
        screen("ro-lr3", 502.0, batch_size=32, compile="reduce-overhead"),
        screen("b64", 447.0, batch_size=64, compile="reduce-overhead"),
        screen("tf32", 267.0, batch_size=16, precision="tf32", compile="reduce-overhead"),
        screen("twin", 113.0, compile="reduce-overhead"),
    ]
    picks = {c.id: c for c in loss_check_candidates(trials, BASELINE, top=8)}
    passed = [picks["twin"], picks["ro-lr6-device"], picks["ro-lr3"], picks["b64"]]
    assert not could_be_remeasured(picks["tf32"], passed, top=3)
    assert could_be_remeasured(picks["tf32"], passed, top=5)  # four faster: a fifth slot is still open
    # Only passed groups count: with b64 failing its check, three configs are faster, and top=4 leaves room.
    assert could_be_remeasured(picks["tf32"], passed[:3], top=4)
    assert not could_be_remeasured(picks["tf32"], passed[:3], top=3)
    # The same config screened twice counts once (the re-measure times distinct configs).
    dup = screen("ro-lr3-again", 501.0, batch_size=32, compile="reduce-overhead")
    twice = loss_check_candidates([*trials, dup], BASELINE, top=8)
    ro = next(c for c in twice if c.id == "ro-lr6-device")
    lr3 = next(c for c in twice if c.id == "ro-lr3")
    assert len(lr3.rows) == 2
    assert could_be_remeasured(picks["tf32"], [ro, lr3], top=4)  # 3 distinct, not 4
    assert not could_be_remeasured(picks["tf32"], [ro, lr3], top=3)


def test_a_round_takes_no_candidate_its_faster_members_would_put_out_of_reach():
    # Run M's shape (one H200): three fast groups and an eager batch-8 config at lr 6e-4 (its own loss key,
    # 15K tok/s: ten minutes of loss run), and the baseline's twin (its loss group passes with the baseline).
    trials = [
        screen("fused128", 1_515_834.0, batch_size=128, precision="bf16", compile="reduce-overhead"),
        screen("fp16-128", 822_248.0, batch_size=128, precision="fp16", compile="reduce-overhead"),
        screen("tf32-16", 306_338.0, batch_size=16, precision="tf32", compile="reduce-overhead"),
        screen("twin", 97_012.0, compile="reduce-overhead"),
        screen("eager-lr6", 15_285.0, lr=6e-4),
    ]
    limits = Limits(runs=8, time_s=math.inf, tokens=10**7, remeasure_top=2)
    plan = LossPlan.of(trials, BASELINE, limits)
    # spread over (batch, lr): batch 128's fastest, batch 16's, then batch 128's second
    assert [p.id for p in plan.next_round(4)] == ["fused128", "tf32-16", "fp16-128"]
    # slower than the twin, which passes with the baseline's own loss: never a loss run
    assert plan.queue == [] and plan.ended_by is None
    # a re-measure of one: were fused128 to pass, the re-measure could time neither of the others: they
    # wait for a round after its failure
    plan = LossPlan.of(trials, BASELINE, replace(limits, remeasure_top=1))
    assert [p.id for p in plan.next_round(4)] == ["fused128"]
    fused = next(c for c in loss_check_candidates(trials, BASELINE, 8) if c.id == "fused128")
    plan.record(fused, False)
    assert [p.id for p in plan.next_round(4)] == ["tf32-16", "fp16-128"]


# --- the loss limit ---------------------------------------------------------------------------------------


def test_the_loss_limit_adds_the_tolerance_to_the_baseline_loss_absolute_or_relative():
    absolute = QualitySection(tolerance=0.05).loss_limit(1.5)
    relative = QualitySection(tolerance=0.1, mode="relative").loss_limit(2.0)
    assert (absolute.limit, absolute.mode, absolute.baseline_loss) == (1.5 + 0.05, "absolute", 1.5)
    assert relative.limit == pytest.approx(2.2) and relative.tolerance == 0.1


def test_the_loss_limit_passes_a_finite_loss_up_to_its_limit_and_only_runs_that_trained():
    assert LIMIT.passes(1.55) and LIMIT.passes(1.2) and not LIMIT.passes(1.5501)
    assert not any(LIMIT.passes(x) for x in (None, math.nan, math.inf))
    assert LIMIT.verdict(check("a", {}, 1.52)) and not LIMIT.verdict(check("b", {}, 1.52, status="error"))


# --- with_feasibility ------------------------------------------------------------------------------------


def test_feasibility_cases():
    trials = [
        screen("ok-checked", 300.0, batch_size=64),
        screen("ok-sibling", 250.0, batch_size=64, compile="default"),  # inherits ok-checked's verdict
        screen("over", 400.0, batch_size=512),
        screen("nan-check", 350.0, lr=3e-3),
        screen("speed-only", 200.0, kernels="fused"),
        screen("never", 100.0, batch_size=16),
        screen("own-oom", None, status="oom", batch_size=64),  # same key as a feasible check
        screen("stopped", 80.0, status="stopped", batch_size=64),
    ]
    checked = [
        check("ok-checked", {"batch_size": 64}, 1.52),
        check("over", {"batch_size": 512}, 1.70),
        check("nan-check", {"lr": 3e-3}, math.nan, status="nan"),
    ]
    before = [t.model_dump() for t in trials]
    judged = with_feasibility(trials, checked, LIMIT, baseline=BASELINE)
    assert [t.model_dump() for t in trials] == before  # new rows: the screen's own are left as they were
    got = {t.id: (t.feasible, t.val_loss, t.loss_checked_by) for t in judged}
    assert got == {
        "ok-checked": (True, 1.52, "ok-checked"),
        "ok-sibling": (True, 1.52, "ok-checked"),
        "over": (False, 1.70, "over"),
        "nan-check": (False, None, "nan-check"),
        "speed-only": (True, 1.50, BASELINE_ID),
        "never": (None, None, None),
        "own-oom": (False, None, None),
        "stopped": (True, 1.52, "ok-checked"),
    }


def test_feasibility_a_check_that_errored_is_infeasible_even_with_a_loss():
    trials = [screen("t", 300.0, batch_size=64)]
    checked = [check("t", {"batch_size": 64}, 1.40, status="error")]
    trials = with_feasibility(trials, checked, LIMIT, baseline=BASELINE)
    assert trials[0].feasible is False


def test_feasibility_without_the_baseline_compares_the_named_knobs():
    # screen configs from one search space all name the same knobs; speed-only ones inherit the baseline
    trials = [
        screen("speed", 300.0, compile="default", kernels="fused"),
        screen("batch", 250.0, compile="none", kernels="torch", batch_size=64),
        screen("batch-fused", 240.0, compile="default", kernels="fused", batch_size=64),
    ]
    checked = [check("lc-1", {"batch_size": 64, "compile": "none"}, 1.6)]
    trials = with_feasibility(trials, checked, LIMIT)
    got = {t.id: (t.feasible, t.loss_checked_by) for t in trials}
    assert got == {"speed": (True, BASELINE_ID), "batch": (False, "lc-1"), "batch-fused": (False, "lc-1")}


# --- pick_winner ------------------------------------------------------------------------------------------


def finalist(fid, runs, config=None, feasible=True, jpt=None, trusted=None, val_loss=1.5) -> Finalist:
    return Finalist(
        id=fid,
        config=config or {},
        runs=runs,
        val_loss=val_loss,
        feasible=feasible,
        joules_per_token=jpt,
        telemetry_trusted=trusted,
    )


COMPLEX = {"batch_size": 128, "precision": "bf16", "compile": "default"}  # 3 non-default knobs
SIMPLE = {"batch_size": 128}  # 1 non-default knob


def test_overlapping_ranges_prefer_the_simpler_config():
    fins = [
        finalist("cfg-7", [1000.0, 960.0, 1040.0], COMPLEX),
        finalist("cfg-3", [980.0, 950.0, 1000.0], SIMPLE),
        finalist(BASELINE_ID, [300.0, 310.0, 305.0], {}),
    ]
    sel = pick_winner(fins, BASELINE)
    assert sel.winner.id == "cfg-3"
    assert not sel.telemetry_changed_decision
    assert any("cfg-7 and cfg-3 overlap" in r and "2 fewer non-default knobs" in r for r in sel.reasons)
    assert "2 more non-default knobs" in sel.rejected["cfg-7"]
    assert sel.rejected[BASELINE_ID].startswith("slower")


def test_a_clearly_faster_config_wins_however_complex():
    fins = [finalist("cfg-7", [1100.0, 1090.0, 1120.0], COMPLEX), finalist("cfg-3", [980.0, 950.0], SIMPLE)]
    sel = pick_winner(fins, BASELINE)
    assert sel.winner.id == "cfg-7"
    assert "does not overlap" in sel.rejected["cfg-3"]


def test_equally_simple_overlapping_configs_fall_back_to_the_higher_median():
    fins = [
        finalist("a", [990.0, 1000.0, 1010.0], {"batch_size": 64}),
        finalist("b", [1005.0, 1020.0], SIMPLE),
    ]
    sel = pick_winner(fins, BASELINE)
    assert sel.winner.id == "b"
    assert "lower median" in sel.rejected["a"]


def test_lower_joules_per_token_breaks_the_tie_and_is_flagged():
    fins = [
        finalist("cfg-7", [1000.0, 960.0, 1040.0], COMPLEX, jpt=0.012),
        finalist("cfg-5", [990.0, 955.0, 1020.0], {"batch_size": 128, "precision": "bf16"}, jpt=0.010),
        finalist("cfg-3", [980.0, 950.0, 1000.0], SIMPLE, jpt=0.012),
    ]
    sel = pick_winner(fins, BASELINE)
    assert sel.winner.id == "cfg-5"  # simplicity alone would pick cfg-3
    assert sel.telemetry_changed_decision
    assert any("chose cfg-5: 16.7% lower J/token than cfg-3, the simplest" in r for r in sel.reasons)
    assert any("telemetry changed the decision" in r and "cfg-3" in r for r in sel.reasons)
    assert "higher J/token" in sel.rejected["cfg-3"] and "higher J/token" in sel.rejected["cfg-7"]


def test_the_energy_rule_measures_savings_against_the_simplest():
    # Tied on speed, the complex config uses 17% less energy per token than the simplest: it wins.
    fins = [
        finalist("cfg-7", [1000.0, 960.0, 1040.0], COMPLEX, jpt=0.010),
        finalist("cfg-3", [980.0, 950.0, 1000.0], SIMPLE, jpt=0.012),
    ]
    sel = pick_winner(fins, BASELINE)
    assert sel.winner.id == "cfg-7" and sel.telemetry_changed_decision


def test_energy_saving_below_two_percent_or_missing_leaves_simplicity_in_charge():
    close = [
        finalist("cfg-7", [1000.0, 960.0, 1040.0], COMPLEX, jpt=0.0100),
        finalist("cfg-3", [980.0, 950.0, 1000.0], SIMPLE, jpt=0.0101),  # the fastest saves only 1%
    ]
    assert pick_winner(close, BASELINE).winner.id == "cfg-3"
    partial = [
        finalist("cfg-7", [1000.0, 960.0, 1040.0], COMPLEX, jpt=0.005),
        finalist("cfg-3", [980.0, 950.0, 1000.0], SIMPLE, jpt=None),
    ]
    sel = pick_winner(partial, BASELINE)
    assert sel.winner.id == "cfg-3" and not sel.telemetry_changed_decision


def test_energy_winner_that_is_also_simplest_does_not_flag_telemetry():
    fins = [
        finalist("cfg-7", [1000.0, 960.0, 1040.0], COMPLEX, jpt=0.012),
        finalist("cfg-3", [980.0, 950.0, 1000.0], SIMPLE, jpt=0.010),
    ]
    sel = pick_winner(fins, BASELINE)
    assert sel.winner.id == "cfg-3" and not sel.telemetry_changed_decision


def test_untrusted_telemetry_never_wins_over_a_trusted_config_in_range():
    fins = [
        # fastest, simplest and most efficient, but its run looked wrong
        finalist("shaky", [1010.0, 1000.0, 1050.0], SIMPLE, jpt=0.005, trusted=False),
        finalist("solid", [990.0, 960.0, 1005.0], COMPLEX, jpt=0.010, trusted=True),
        finalist("unknown", [980.0, 950.0, 1000.0], COMPLEX, jpt=0.010, trusted=None),
    ]
    sel = pick_winner(fins, BASELINE)
    assert sel.winner.id == "solid"
    assert "untrusted" in sel.rejected["shaky"]
    assert any("shaky not chosen" in r for r in sel.reasons)


def test_untrusted_config_alone_in_range_can_win_with_a_note():
    fins = [
        finalist("shaky", [2000.0, 1990.0, 2010.0], SIMPLE, trusted=False),
        finalist("solid", [990.0, 960.0, 1005.0], SIMPLE, trusted=True),
    ]
    sel = pick_winner(fins, BASELINE)
    assert sel.winner.id == "shaky"
    assert any("untrusted" in r for r in sel.reasons)


def test_no_feasible_finalist_means_no_winner():
    fins = [
        finalist("over", [1000.0], SIMPLE, feasible=False),
        finalist("unchecked", [900.0], COMPLEX, feasible=None),
        finalist("no-runs", [math.nan], COMPLEX),
    ]
    sel = pick_winner(fins, BASELINE)
    assert sel.winner is None
    assert sel.rejected == {
        "over": "not feasible: loss check failed or over the limit",
        "unchecked": "not feasible: loss never checked",
        "no-runs": "no successful exclusive run",
    }
    assert any("baseline stays the answer" in r for r in sel.reasons)
    assert pick_winner([], BASELINE).winner is None


def test_selection_to_dict_is_the_summary_section():
    sel = pick_winner([finalist("a", [1.0, 2.0])], BASELINE)
    assert isinstance(sel, Selection)
    assert set(sel.to_record().model_dump()) == {
        "reasons",
        "telemetry_changed_decision",
        "rejected",
        "finishes_later",
        "tied",
        "tie_break",
    }


runs_st = st.lists(st.floats(100, 2000), min_size=1, max_size=4)
finalist_st = st.builds(
    finalist,
    fid=st.text("abcdef", min_size=1, max_size=3),
    runs=runs_st,
    config=st.dictionaries(st.sampled_from(["batch_size", "precision", "compile"]), st.just("x"), max_size=3),
    feasible=st.sampled_from([True, True, False, None]),
    jpt=st.one_of(st.none(), st.floats(0.001, 0.02)),
    trusted=st.sampled_from([True, False, None]),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(finalist_st, max_size=6, unique_by=lambda f: f.id))
def test_winner_is_feasible_in_range_of_the_fastest_and_trusted_when_possible(fins):
    sel = pick_winner(fins, BASELINE)
    ok = [f for f in fins if f.feasible is True]
    if not ok:
        assert sel.winner is None
        return
    ranges = {f.id: spread(f.runs) for f in ok}
    top = ranges[min(ranges, key=lambda fid: (-ranges[fid][0], fid))]  # ties: the same order as pick_winner
    in_range = [f for f in ok if ranges[f.id][1] <= top[2] and ranges[f.id][2] >= top[1]]
    assert sel.winner in in_range
    if any(f.telemetry_trusted is not False for f in in_range):
        assert sel.winner.telemetry_trusted is not False
    assert set(sel.rejected) | {sel.winner.id} == {f.id for f in fins}


def timed(fid, runs, warmup_s, tokens, config=None) -> Finalist:
    fin = finalist(fid, runs, config or {"compile": fid})
    fin.warmup_s = warmup_s
    fin.time_to_train_s = warmup_s + tokens / spread(runs)[0]
    return fin


def test_a_short_planned_run_goes_to_the_config_that_finishes_it_first():
    # compiled: 10x faster once running but 120 s of compile; eager: no compile
    fins = [
        timed("compiled", [1000.0, 990.0, 1010.0], 120.0, 50_000),
        timed("eager", [100.0, 99.0], 1.0, 50_000),
    ]
    sel = finish_first(pick_winner(fins, BASELINE), fins, 50_000)  # 50K tokens: eager done in ~500 s
    assert sel.winner.id == "compiled"  # 120 + 50 s against 501 s: the compile pays off
    sel = finish_first(pick_winner(fins, BASELINE), fins, 5_000)  # 5K tokens: eager 51 s, compiled 125 s
    assert sel.winner.id == "eager"
    assert "shorter than compiled's break-even against eager" in sel.reasons[-1]
    assert "faster once running" in sel.rejected["compiled"] and "eager" not in sel.rejected
    assert sel.finishes_later == "compiled" and sel.to_record().finishes_later == "compiled"


def test_a_warm_up_measured_beside_other_runs_does_not_overturn_the_faster_winner():
    # Run O, one H100: the fused finalist re-measured 1.35M tok/s against 0.75M for a torch one, but its
    # warm-up, 23.2 s among 15 runs warming up at once, made the torch one's 22 s plan look shorter than
    # its 31 s; alone its warm-up is ~10 s (four GPUs, four runs each), and it finishes first.
    tokens = 10_240_000
    fused = timed("screen-2", [1_343_382.6, 1_345_613.7, 1_349_720.5], 23.2, tokens, {"kernels": "fused"})
    torch_ops = timed("screen-8", [749_705.4, 751_705.8, 753_391.1], 8.5, tokens, {"precision": "fp16"})
    fused.warmup_beside, torch_ops.warmup_beside = 8, 8
    sel = finish_first(pick_winner([fused, torch_ops], BASELINE), [fused, torch_ops], tokens)
    assert sel.winner.id == "screen-2" and sel.finishes_later is None
    assert "measured while 8 other runs warmed up beside it" in sel.reasons[-1]
    assert "screen-2" not in sel.rejected
    # the same figures measured alone: the planned-run time decides, as before
    fused.warmup_beside = 0
    sel = finish_first(pick_winner([fused, torch_ops], BASELINE), [fused, torch_ops], tokens)
    assert sel.winner.id == "screen-8" and sel.finishes_later == "screen-2"


def test_finishing_first_within_the_noise_does_not_overturn_the_winner():
    fins = [
        timed("a", [1000.0, 900.0, 1100.0], 10.0, 10_000),
        timed("b", [1000.0, 800.0, 1200.0], 9.0, 10_000),
    ]
    sel = pick_winner(fins, BASELINE)
    assert finish_first(sel, fins, 10_000).winner.id == sel.winner.id
    assert sel.finishes_later is None


# --- what the screen finished, and how the search ends (issue 33) -------------------------------------------

ROOT = Path(__file__).resolve().parents[1]


def stopped(tid: str, started: bool = True, tps: float | None = None):
    """A screen trial Tune stopped: its budget ended (or the stopper ended it); `started`: it reported where it
    ran (its first report, before it compiles)."""
    where = {"node": "n0", "pid": 4242} if started else {}
    return make_row(tid, "screen", {"batch_size": 64}, status="stopped", tokens_per_s=tps, **where)


def test_a_screen_whose_budget_ended_during_the_first_compiles_says_so_and_what_to_do():
    rows = [stopped("screen-0"), stopped("screen-1"), stopped("screen-2", started=False)]
    outcome = ScreenOutcome.of(rows)
    assert (outcome.finished, outcome.compiling, outcome.waiting) == (0, 2, 1)
    assert nothing_screened(outcome, 60.0) == (
        "the screen finished 0 of 3 configs: its time budget (60 s) ended while 2 trials were still "
        "compiling and 1 had not started; raise --time-budget (e.g. --time-budget 10m)"
    )
    assert outcome.line(60.0) == nothing_screened(outcome, 60.0)
    assert "--time-budget 30m" in nothing_screened(outcome, 600.0)  # three times a budget over 10 minutes
    assert nothing_screened(ScreenOutcome.of([]), 1.0) == (
        "the screen finished 0 configs: its time budget (1 s) ended while no trial had started; raise "
        "--time-budget (e.g. --time-budget 10m)"
    )
    waiting = ScreenOutcome.of([stopped("screen-0", started=False), stopped("screen-1", started=False)])
    assert nothing_screened(waiting, 5.0).endswith(
        "its time budget (5 s) ended while 2 trials had not started; raise --time-budget (e.g. --time-budget 10m)"
    )


def test_a_screen_whose_every_trial_failed_names_how():
    rows = [
        screen("screen-0", None, "oom"),
        screen("screen-1", None, "oom"),
        screen("screen-2", None, "error"),
    ]
    why = nothing_screened(ScreenOutcome.of(rows), 600.0)
    assert why == (
        "the screen finished 0 of 3 configs: every trial failed (2 out of memory, 1 errored); report.md says "
        "why each one failed"
    )


def test_a_screen_that_finished_a_config_has_no_such_cause_and_counts_what_it_finished():
    rows = [screen("screen-0", 900.0), stopped("screen-1", tps=100.0), stopped("screen-2"),
            screen("screen-3", None, "oom")]  # fmt: skip
    outcome = ScreenOutcome.of(rows)
    assert nothing_screened(outcome, 60.0) is None
    assert outcome.line(60.0) == (
        "the screen finished 1 of 4 configs (1 stopped early, 1 stopped before a timed step, 1 failed)"
    )


def smoke_context(out: Path) -> SearchContext:
    cfg = load_search_config(str(ROOT / "configs" / "smoke.yaml"), ["search.time_budget=45s"])
    hw = Hardware(cpus=2, cuda=False)
    return SearchContext(
        cfg=cfg,
        out=out,
        base=cfg.train,
        hw=hw,
        cluster_cpus=2,
        state=State(out),
        command="python -m tuner.search",
    )


def finished_search(out: Path, screen_rows: list, **window: Any) -> tuple[finish.FinishInputs, Summary]:
    """A CPU search's summary as finish.summarize makes it: the baseline's loss run and its re-measure, whose
    timed windows had the CPU load `window` (TrialRow fields: cpu_shared, cpu_others_cores, ...)."""
    ctx = finish_inputs(smoke_context(out))
    base = make_row(BASELINE_ID, "baseline", {}, tokens_per_s=8000.0, val_loss=2.0, execution={})
    again = [make_row(f"remeasure-{i}", "remeasure", {}, tokens_per_s=t, finalist=BASELINE_ID, **window)
             for i, t in enumerate((19000.0, 20000.0, 21000.0))]  # fmt: skip
    loss_limit = LossLimit.of(2.0, 0.05, "absolute")
    screen_rows = with_feasibility(screen_rows, [], loss_limit, baseline=ctx.base.model_dump())
    return ctx, finish.summarize(ctx, base, screen_rows, [], again, loss_limit)


def test_a_search_whose_screen_finished_nothing_exits_6_with_its_cause_and_the_baseline(tmp_path, capsys):
    ctx, summary = finished_search(tmp_path, [stopped("screen-0"), stopped("screen-1")])
    assert summary.best is None and summary.nothing_screened.startswith("the screen finished 0 of 2 configs")
    assert finish.write(ctx, summary) == Exit.NOTHING_SCREENED == 6
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-2] == (
        "the screen finished 0 of 2 configs: its time budget (45 s) ended while 2 trials were still compiling; "
        "raise --time-budget (e.g. --time-budget 10m); the baseline stays the answer (best.yaml is the baseline)"
    )
    assert "no config passed the loss check" not in "\n".join(lines)  # only the baseline was checked
    assert lines[-1] == f"run it: python -m trainables.train --config {(tmp_path / 'best.yaml').resolve()}"
    assert load_config(str(tmp_path / "best.yaml")).batch_size == ctx.base.batch_size
    saved = Summary.model_validate_json((tmp_path / "summary.json").read_text())
    assert saved.nothing_screened == summary.nothing_screened
    report = (tmp_path / "report.md").read_text()
    assert "**The screen finished 0 of 2 configs: its time budget (45 s) ended" in report


def test_exit_3_on_a_cpu_says_why_the_baseline_usually_stays_then_the_next_command(tmp_path, capsys):
    infeasible = make_row(
        "screen-0", "screen", {"batch_size": 64, "lr_scaling": "sqrt"}, tokens_per_s=30000.0
    )
    ctx, summary = finished_search(tmp_path, [infeasible])
    assert summary.nothing_screened is None
    assert finish.write(ctx, summary) == Exit.BASELINE_STAYS
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-3].startswith("no config passed the loss check")
    assert lines[-2] == finish.CPU_BASELINE_NOTE and "CUDA graphs and fused kernels need a GPU" in lines[-2]
    assert lines[-1].startswith("run it: python -m trainables.train --config ")


# Two busy loops on a 2-core host: its windows as trainables/training/cpu_load.py and observe.annotate record them.
BUSY = {"cpu_own_cores": 0.1, "cpu_others_cores": 1.8, "cpu_count": 2, "cpu_shared": True}


def test_a_baseline_kept_on_contended_windows_is_untrusted_and_says_so_at_the_top(tmp_path, capsys):
    # issue 44: under two busy loops the smoke search kept the baseline at 707 tok/s (14,917 alone) and its
    # summary.json said "untrusted": false: nothing else passed, so there was no winner to refuse
    infeasible = make_row(
        "screen-0", "screen", {"batch_size": 64, "lr_scaling": "sqrt"}, tokens_per_s=30000.0
    )
    ctx, summary = finished_search(tmp_path, [infeasible], **BUSY)
    assert summary.untrusted and summary.best is None
    assert finish.write(ctx, summary) == Exit.BASELINE_STAYS  # the answer rests on the loss check: still 3
    said = capsys.readouterr().err
    assert "no config passed the loss check" in said and "the baseline's speed figure is not trusted" in said
    top = (tmp_path / "report.md").read_text().split("\n## ")[0]
    assert "Not trusted: the speed figures were taken" in top and "20,000 tok/s (contended)" in top
    calm = finished_search(tmp_path, [infeasible], cpu_own_cores=1.9, cpu_others_cores=0.1, cpu_count=2)[1]
    assert not calm.untrusted


def test_nothing_screened_on_contended_windows_is_untrusted_and_still_exits_6(tmp_path, capsys):
    ctx, summary = finished_search(tmp_path, [stopped("screen-0")], **BUSY)
    assert summary.untrusted and summary.nothing_screened
    assert finish.write(ctx, summary) == Exit.NOTHING_SCREENED
    top = (tmp_path / "report.md").read_text().split("\n## ")[0]
    assert "Not trusted" in top and "20,000 tok/s (contended)" in top and "(exit 6)" in top


def test_the_cpu_note_is_not_said_on_a_gpu(tmp_path, capsys):
    infeasible = make_row(
        "screen-0", "screen", {"batch_size": 64, "lr_scaling": "sqrt"}, tokens_per_s=30000.0
    )
    ctx, summary = finished_search(tmp_path, [infeasible])
    ctx = replace(ctx, hw=Hardware(cpus=16, cuda=True, gpus=1))
    assert finish.write(ctx, summary) == Exit.BASELINE_STAYS
    assert finish.CPU_BASELINE_NOTE not in capsys.readouterr().err


def test_finishing_first_by_less_than_a_warm_ups_noise_keeps_the_faster_winner():
    # Run Z, one H200, a remembered answer confirmed: the fused batch 256 (1.63M tok/s, its cached graph
    # warmed up in ~12.7 s) lost to a torch batch 64 (0.72M, 4.6 s) for finishing 10.24M tokens 0.3 s sooner.
    tokens = 10_240_000
    fused = timed("screen-2", [1_616_006.3, 1_628_362.0, 1_640_717.4], 12.7, tokens, {"kernels": "fused"})
    torch_ops = timed("screen-1", [721_734.5, 724_866.1, 727_997.7], 4.6, tokens)
    fused.warmup_beside = torch_ops.warmup_beside = 0
    sel = finish_first(pick_winner([fused, torch_ops], BASELINE), [fused, torch_ops], tokens)
    assert sel.winner.id == "screen-2" and sel.finishes_later is None
    # a warm-up 4 s longer: the torch config finishes beyond the noise, and wins
    fused.warmup_s = 16.7
    sel = finish_first(pick_winner([fused, torch_ops], BASELINE), [fused, torch_ops], tokens)
    assert sel.winner.id == "screen-1" and sel.finishes_later == "screen-2"
