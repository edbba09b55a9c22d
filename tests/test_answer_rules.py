"""Each rule that decides the answer, held through the path that applies it: a search whose phases recorded
these rows, run by the search's own pipeline to its exit code and OUT (tests/recorded_search.py), not only by
a test of the rule alone. The loss limit: a config over it is never the answer. Untrusted figures: no winner
crowned on them (exit 4), the baseline kept in summary.json and best.yaml. The tie: configs within each
other's spread are named as one, and the simpler wins."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.answer_checks import check_answer
from tests.recorded_search import BASE_LOSS, BUSY, loss_run, run_recorded, screened, timed
from trainables.common.exit_codes import Exit
from tuner.state.records import BASELINE_ID, Summary

FAST = {"batch_size": 64, "lr_scaling": "sqrt"}  # a loss knob changed: a loss run of its own
SLOWER = {"batch_size": 32}


def test_a_config_over_the_loss_limit_is_never_the_answer_even_timed_fastest(tmp_path, shared_cpu_ray):
    over, under = screened("screen-0", 30000.0, **FAST), screened("screen-1", 20000.0, **SLOWER)
    checked = [
        loss_run("loss_check_0-0", over, BASE_LOSS + 0.06),
        loss_run("loss_check_0-1", under, BASE_LOSS + 0.01),
    ]
    runs = timed(BASELINE_ID, [9000.0, 9100.0, 9200.0]) + timed("screen-0", [31000.0, 31500.0, 32000.0], FAST)
    runs += timed("screen-1", [20000.0, 20500.0, 21000.0], SLOWER)
    code, s = run_recorded(tmp_path, [over, under], checked, runs)
    assert code == Exit.OK and s.best.id == "screen-1", (code, s.best)
    assert {t.id: t.feasible for t in s.trials if t.phase == "screen"} == {
        "screen-0": False,
        "screen-1": True,
    }
    check_answer(tmp_path, code)
    assert "screen-0: val loss 2.0600 over the limit 2.0500 by 0.0100" in (tmp_path / "report.md").read_text()


def test_only_configs_over_the_limit_keep_the_baseline_with_exit_3(tmp_path, shared_cpu_ray):
    over = screened("screen-0", 30000.0, **FAST)
    runs = timed(BASELINE_ID, [9000.0]) + timed("screen-0", [31000.0, 31500.0, 32000.0], FAST)
    code, s = run_recorded(tmp_path, [over], [loss_run("loss_check_0-0", over, BASE_LOSS + 0.06)], runs)
    assert code == Exit.BASELINE_STAYS and s.best is None
    check_answer(tmp_path, code)


def test_a_winner_on_contended_figures_is_refused_exit_4_and_the_baseline_kept(tmp_path, shared_cpu_ray):
    under = screened("screen-1", 20000.0, **SLOWER)
    runs = timed(BASELINE_ID, [9000.0, 9100.0, 9200.0], **BUSY)
    runs += timed("screen-1", [20000.0, 20500.0, 21000.0], SLOWER, **BUSY)
    code, s = run_recorded(tmp_path, [under], [loss_run("loss_check_0-0", under, BASE_LOSS + 0.01)], runs)
    assert code == Exit.UNTRUSTED and s.best is None and s.untrusted
    assert "would have won on untrusted figures" in s.selection.rejected["screen-1"]
    check_answer(tmp_path, code)
    top = (tmp_path / "report.md").read_text().split("\n## ")[0]
    assert "Not trusted" in top and "The baseline (9,100 tok/s (contended)" in top


def test_a_tie_names_both_and_the_simpler_wins_through_the_search(tmp_path, shared_cpu_ray, capsys):
    fast = screened("screen-1", 22000.0, batch_size=32, lr_scaling="sqrt")  # two knobs changed
    simple = screened("screen-2", 21000.0, **SLOWER)  # one
    checked = [loss_run("loss_check_0-0", fast, BASE_LOSS), loss_run("loss_check_0-1", simple, BASE_LOSS)]
    runs = timed(BASELINE_ID, [9000.0, 9100.0, 9200.0]) + timed(
        "screen-1", [21000.0, 22000.0, 23000.0], fast.config
    )
    runs += timed("screen-2", [20000.0, 21000.0, 22000.0], SLOWER)
    code, s = run_recorded(tmp_path, [fast, simple], checked, runs)
    assert code == Exit.OK and s.best.id == "screen-2", (code, s.best)
    assert s.selection.tied == ["screen-2", "screen-1"]
    assert s.selection.tie_break == "1 fewer non-default knob than screen-1 (1 vs 2)"
    check_answer(tmp_path, code)
    answer = (tmp_path / "report.md").read_text().split("\n\n")[1]
    assert answer.startswith(
        "**screen-2** is chosen from a tie with screen-1 (22,000 tok/s, range 21,000–23,000), within each other's "
        "spread (tie break: 1 fewer non-default knob than screen-1 (1 vs 2)): 21,000 tok/s"
    )


def test_a_tie_with_the_baseline_keeps_it_with_exit_3_and_names_the_tie(tmp_path, shared_cpu_ray, capsys):
    tied = screened("screen-1", 9300.0, **SLOWER)
    runs = timed(BASELINE_ID, [9000.0, 9500.0, 10000.0]) + timed(
        "screen-1", [9200.0, 9800.0, 10400.0], SLOWER
    )
    code, s = run_recorded(tmp_path, [tied], [loss_run("loss_check_0-0", tied, BASE_LOSS)], runs)
    # the code of a search where nothing passed: one answer, one code (issue 56 item 2)
    assert (
        code == Exit.BASELINE_STAYS
        and s.best.id == BASELINE_ID
        and s.selection.tied == [BASELINE_ID, "screen-1"]
    )
    check_answer(tmp_path, code)
    assert "the baseline stays the answer (9,500 tok/s), a tie with screen-1: " in capsys.readouterr().err
    answer = (tmp_path / "report.md").read_text().split("\n\n")[1]
    assert answer.startswith(
        "**A tie:** the baseline (9,500 tok/s, range 9,000–10,000) and screen-1 (9,800 tok/s"
    )


RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
# every recorded OUT with its best.yaml, from searches that recorded their finalists' runs
ANSWERED = sorted(
    p.parent
    for p in RESULTS.rglob("best.yaml")
    if (p.parent / "summary.json").exists()
    and json.loads((p.parent / "summary.json").read_text()).get("finalists")
)


@pytest.mark.parametrize("out", ANSWERED, ids=[str(p.relative_to(RESULTS)) for p in ANSWERED])
def test_every_recorded_search_holds_its_answer_on_its_exit(out):
    """tests/answer_checks.py against searches that ran: its rules are the search's, and best.yaml is the answer."""
    summary = Summary.model_validate_json((out / "summary.json").read_text())
    code = (
        Exit.NOTHING_SCREENED if summary.nothing_screened
        else Exit.UNTRUSTED if summary.refused
        else Exit.BASELINE_STAYS if summary.best is None or summary.best.id == BASELINE_ID
        else Exit.OK
    )  # fmt: skip
    check_answer(out, code)
