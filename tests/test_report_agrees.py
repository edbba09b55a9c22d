"""A report says one thing of each figure, cap and tie (issue 56 item 5): every statement about runs, caps and
ties is drawn from the record that decided it (a finalist's runs, summary.json's loss_check, the selection),
so two sections never disagree. Each test reproduces a contradiction a report made, from a recorded
summary under docs/results/ or a search's recorded rows run through its own finish (tests/recorded_search.py)."""

from __future__ import annotations

import html
import json
import re

import pytest

from tests.recorded_search import BASE_LOSS, BUSY, QUIET, loss_run, run_recorded, screened, timed
from tests.test_recorded_summaries import RECORDED, RESULTS
from trainables.common.exit_codes import Exit
from tuner.report import render_html, render_markdown
from tuner.state.records import BASELINE_ID, Summary


def recorded(name: str) -> Summary:
    return Summary.model_validate(json.loads((RESULTS / name / "summary.json").read_text()))


def section(report: str, title: str) -> str:
    return report.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def remeasure_line(report: str) -> str:
    (line,) = [l for l in section(report, "How each number was measured").splitlines() if "Re-measure:" in l]
    return line


# --- the runs a figure rests on ------------------------------------------------------------------------------


def test_the_baselines_runs_are_counted_once_where_a_notice_says_how_many_its_figure_rests_on():
    # a smoke search (026b348): the notice said "rests on 1 run", the measured section "3 runs each"
    report = render_markdown(recorded("decisions-smoke-026b348-8963593/after"))
    notice = "its figure rests on 1 run"
    assert notice in section(report, "Notices")
    line = remeasure_line(report)
    assert "3 runs each" not in line and "the top feasible configs" not in line
    assert line.startswith(
        "- Re-measure: the baseline alone (no other config was a feasible finalist), 3 runs asked"
    )
    assert "the baseline's figure rests on 1 of the 3 runs asked: 2 not timed" in line


SAYS_RUNS = [p for p in RECORDED if "figure rests on" in p.read_text()]


@pytest.mark.parametrize("path", SAYS_RUNS, ids=[str(p.parent.relative_to(RESULTS)) for p in SAYS_RUNS])
def test_every_recorded_notice_of_the_runs_a_figure_rests_on_agrees_with_the_measured_section(path):
    summary = Summary.model_validate(json.loads(path.read_text()))
    (said,) = [int(m) for n in summary.notices for m in re.findall(r"its figure rests on (\d+) run", n)]
    baseline = next(f for f in summary.finalists if f.id == "baseline")
    assert len(baseline.runs) == said
    assert f"the baseline's figure rests on {said} of the" in remeasure_line(render_markdown(summary))


def test_the_notice_and_the_measured_section_count_the_baselines_runs_from_its_record(
    tmp_path, shared_cpu_ray
):
    # the re-measure left out the baseline's third run (every finalist timed far beyond it) and one of its
    # two windows was contended: the notice, said at finish from the baseline's finalist record (so also
    # after --resume), counts 1 run not timed, as the measured section does; the re-measure's own count was 2
    # (the contended window's re-run among them)
    fast = screened("screen-0", 30000.0, batch_size=64)
    base = timed(BASELINE_ID, [9000.0, 5000.0], warmup_s=1.0, **QUIET)
    base[1] = base[1].model_copy(update=BUSY)
    runs = base + timed("screen-0", [31000.0, 31500.0, 30500.0], fast.config, warmup_s=1.0, **QUIET)
    code, summary = run_recorded(tmp_path, [fast], [loss_run("loss_check_0-0", fast, BASE_LOSS)], runs)
    assert code == Exit.OK and summary.best.id == "screen-0"
    (notice,) = [n for n in summary.notices if "can no longer change the answer" in n]
    assert ": 1 of its runs not timed (every other finalist's slowest run is over 2.25x" in notice
    baseline = next(f for f in summary.finalists if f.id == BASELINE_ID)
    assert (baseline.runs, baseline.not_timed) == ([9000.0], 1)
    assert notice.endswith(f"({baseline.settled}); its figure rests on 1 run")
    line = remeasure_line((tmp_path / "report.md").read_text())
    assert (
        "the baseline's figure rests on 1 of the 3 runs asked: 1 not timed, as its figure could no longer "
        "change the answer, 1 left out as contended"
    ) in line


def test_a_figure_on_every_run_asked_says_nothing_more():
    line = remeasure_line(render_markdown(recorded("gpu-search-h200-g")))
    assert "rests on" not in line and "3 runs asked of each, and the baseline, 6" in line


# --- how the winner was chosen, where nothing else passed -------------------------------------------------------


def test_a_baseline_alone_with_one_run_is_not_said_to_have_a_spread_no_other_config_is_within(
    tmp_path, shared_cpu_ray
):
    # a smoke search (026b348): "chose baseline: baseline 13,602 tok/s [13,602–13,602], no other config within
    # its spread" where nothing else passed and its figure was one run
    over = screened("screen-0", 30000.0, batch_size=64, lr_scaling="sqrt")
    runs = timed(BASELINE_ID, [9443.0]) + timed("screen-0", [31000.0, 31500.0], over.config)
    code, _ = run_recorded(tmp_path, [over], [loss_run("loss_check_0-0", over, BASE_LOSS + 0.06)], runs)
    assert code == Exit.BASELINE_STAYS
    chosen = section((tmp_path / "report.md").read_text(), "How the winner was chosen")
    assert "within its spread" not in chosen and "[9,443–9,443]" not in chosen
    assert (
        "the baseline stays: no other finalist passed the loss check with a timed run (baseline 9,443 tok/s (one run))"
        in chosen
    )


# --- the cap that ended the loss check -------------------------------------------------------------------------


def test_the_cap_that_ended_the_loss_check_is_named_alike_in_its_note_and_each_rejection():
    # a smoke search (9c63ccd): its note named search.max_loss_checks, screen-2's rejection search.loss_check_top
    summary = recorded("decisions-smoke-9c63ccd-19d39db/after")
    assert summary.loss_check.ended_by == "max_loss_checks" and summary.loss_check.unchecked_faster == [
        "screen-2"
    ]
    report = render_markdown(summary)
    assert "Note: the loss check ended at its cap of 2 runs (search.max_loss_checks) after 2 runs" in report
    why = section(report, "Why others were rejected")
    assert "loss_check_top" not in why
    assert (
        "- screen-2: its loss was never checked: the loss check ended at its cap of 2 runs "
        "(search.max_loss_checks) before it; 10,299 tok/s in the screen"
    ) in why


def html_note(summary: Summary) -> str:
    """report.html's note under the answer, as its text."""
    found = re.findall(r'<p id="loss-check-note">(.*?)</p>', render_html(summary), re.S)
    return html.unescape(found[0]) if found else ""


def test_report_html_names_the_cap_that_ended_the_loss_check_as_report_md_does():
    # report.md said "Note: the loss check ended at its cap of 2 runs (search.max_loss_checks) ...";
    # report.html said nothing of the stop, while its rejection of screen-2 named the cap
    summary = recorded("decisions-smoke-9c63ccd-19d39db/after")
    (md_note,) = [l for l in render_markdown(summary).splitlines() if l.startswith("Note: the loss check")]
    assert html_note(summary) == md_note
    assert md_note.startswith("Note: the loss check ended at its cap of 2 runs (search.max_loss_checks)")
    timed_out = summary.loss_check.model_copy(update={"ended_by": "loss_check_time", "time_budget_s": 120.0})
    assert "at its time budget of 120 s (search.loss_check_time) after 2 runs" in html_note(
        summary.model_copy(update={"loss_check": timed_out})
    )
    checked = summary.loss_check.model_copy(update={"ended_by": "all_checked", "unchecked_faster": []})
    assert html_note(summary.model_copy(update={"loss_check": checked})) == ""


def test_a_time_budget_or_a_failure_is_named_where_it_left_a_config_unchecked():
    summary = recorded("decisions-smoke-9c63ccd-19d39db/after")
    timed_out = summary.loss_check.model_copy(update={"ended_by": "loss_check_time", "time_budget_s": 120.0})
    why = section(
        render_markdown(summary.model_copy(update={"loss_check": timed_out})), "Why others were rejected"
    )
    assert "the loss check ended at its time budget of 120 s (search.loss_check_time) before it" in why
    ruled = summary.loss_check.model_copy(update={"unchecked_faster": [], "ruled_out": ["screen-2"]})
    why = section(
        render_markdown(summary.model_copy(update={"loss_check": ruled})), "Why others were rejected"
    )
    assert (
        "- screen-2: its loss was never checked: a loss run ruled it out (a larger batch at the peak lr"
        in why
    )


# --- a run stopped early on a figure the table does not trust ----------------------------------------------------


def test_a_config_stopped_early_on_a_contended_figure_says_the_stop_rests_on_it():
    # a smoke search under load (40bcd84): the table marked screen-6's 416 tok/s (contended), its rejection said
    # only "slower than the early-stop threshold"
    report = render_markdown(recorded("decisions-smoke-40bcd84-77a8983/after"))
    assert "| screen-6 (stopped) | 64 | 0 | bf16 | none | torch | 416 (contended) |" in report
    why = section(report, "Why others were rejected")
    assert (
        "- screen-6: stopped early on a contended figure: 416 tok/s, timed while other processes used the "
        "machine, was under the early-stop threshold (search.early_stop_ratio x the fastest finished so far); "
        "alone it may have been faster"
    ) in why
    assert "slower than the early-stop threshold" not in why


def test_a_config_stopped_early_on_a_trusted_figure_is_slower():
    summary = recorded("decisions-smoke-40bcd84-77a8983/after")
    quiet = [t.model_copy(update={"cpu_shared": False, "cpu_others_cores": 0.05}) for t in summary.trials]
    why = section(render_markdown(summary.model_copy(update={"trials": quiet})), "Why others were rejected")
    assert "- screen-6: stopped early: slower than the early-stop threshold (416 tok/s)" in why


def test_an_early_stop_quotes_the_ratio_summary_json_records(tmp_path, shared_cpu_ray):
    # the rejection said "slower than the early-stop threshold" and summary.json held no threshold to say
    fast, slow = (
        screened("screen-0", 30000.0, batch_size=64),
        screened("screen-1", 416.0, "stopped", batch_size=8),
    )
    runs = timed(BASELINE_ID, [9000.0, 9100.0, 8900.0]) + timed("screen-0", [31000.0, 31500.0], fast.config)
    code, summary = run_recorded(tmp_path, [fast, slow], [loss_run("loss_check_0-0", fast, BASE_LOSS)], runs)
    why = section((tmp_path / "report.md").read_text(), "Why others were rejected")
    assert (
        "- screen-1: stopped early: 416 tok/s, under the early-stop threshold (0.5 x the fastest finished so "
        "far: search.early_stop_ratio)"
    ) in why
    assert code == Exit.OK and summary.early_stop_ratio == 0.5  # configs/smoke.yaml leaves it at its default


def test_an_early_stop_on_a_contended_figure_quotes_the_recorded_ratio():
    summary = recorded("decisions-smoke-40bcd84-77a8983/after").model_copy(update={"early_stop_ratio": 0.3})
    why = section(render_markdown(summary), "Why others were rejected")
    assert (
        "was under the early-stop threshold (0.3 x the fastest finished so far: search.early_stop_ratio); "
        "alone it may have been faster"
    ) in why


# --- a tie ---------------------------------------------------------------------------------------------------------


def test_a_tie_the_baseline_won_is_said_to_be_one_not_that_no_config_beat_it():
    # a smoke search (9c63ccd): the baseline and screen-1 overlapped and both passed; the answer said "No config
    # beat the baseline within tolerance"
    summary = recorded("decisions-smoke-9c63ccd-19d39db/after")
    assert summary.selection.tied == ["baseline", "screen-1"]  # read from the rejection it recorded then
    answer = render_markdown(summary).split("\n\n")[1]
    assert "No config beat" not in answer
    assert answer.startswith(
        "**A tie:** the baseline (9,862 tok/s, range 8,590–12,044) and screen-1 (7,809 tok/s, range 6,844–9,111) "
        "are within each other's spread; the baseline stays the answer (tie break: the fastest, with no more "
        "non-default knobs than the others), val loss 1.9833 (limit 2.0333"
    )


def test_a_baseline_no_config_passed_against_still_says_no_config_beat_it():
    answer = render_markdown(recorded("decisions-smoke-026b348-8963593/after")).split("\n\n")[1]
    assert answer.startswith("No config beat the baseline within tolerance; the baseline (13,602 tok/s")


def test_a_winner_chosen_from_a_tie_is_not_called_the_fastest():
    # one H200 (run g): screen-3 and screen-13 overlapped; the answer called screen-3 "the fastest config"
    answer = render_markdown(recorded("gpu-search-h200-g")).split("\n\n")[1]
    assert answer.startswith(
        "**screen-3** is chosen from a tie with screen-13 (471,575 tok/s, range 400,164–581,469), within each "
        "other's spread (tie break: the fastest, with no more non-default knobs than the others): 553,377 tok/s"
    )


# --- where the evidence is -----------------------------------------------------------------------------------


def test_a_confirmation_points_to_the_earlier_out_only_while_it_holds_the_evidence(tmp_path):
    # issue 56 item 6: a confirmation's report still sent the reader to an OUT deleted since, also once
    # `python -m tuner.report` rebuilt it
    earlier = tmp_path / "first"
    (earlier / "trials").mkdir(parents=True)
    summary = recorded("decisions-smoke-026b348-8963593/after").model_copy(
        update={"remembered": {"when": "2026-12-07 10:00", "out": str(earlier)}}
    )
    kept = render_markdown(summary)
    assert f"The evidence they rest on (trial folders, ledgers, Optuna journal) is in {earlier}." in kept
    (earlier / "trials").rmdir()
    earlier.rmdir()
    gone = render_markdown(summary)
    assert f"is in {earlier}" not in gone and f"was in {earlier}, which no longer holds it" in gone
