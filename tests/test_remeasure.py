"""Measurement that load cannot steer: the re-measure interleaves its repeats over the configs and the
baseline, times a contended window again (bounded), and the search crowns no winner on contended figures.

The Ray tests run real Ray Tune trials of the toy workload in this process; the CPU burner is real busy
processes on every core, the contention flag the one the search computes from psutil."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
from toy_workload import TOY

from tests.factories import make_row, synthetic_summary, without_best, without_telemetry
from trainables.spec import TrialSpec
from tuner.decide import finalists as records
from tuner.decide.select import finish_first, pick_winner, refuse_untrusted
from tuner.phases import finish, remeasure
from tuner.pipeline import remeasure_inputs, run_scheduler
from tuner.report import render_html, render_markdown, view
from tuner.runs.observe import Telemetry
from tuner.runs.request import Placement, TrialInputs
from tuner.runs.scheduler import RunScheduler
from tuner.runs.tune import round_robin, run_cases
from tuner.state.records import BASELINE_ID, TrialRow

BUSY_LOOP = "import time\nend = time.time() + 600\nwhile time.time() < end: pass\n"


def remeasured(fid: str, *speeds: float, contended: tuple[bool, ...] = ()) -> list[TrialRow]:
    flags = contended or (False,) * len(speeds)
    return [
        make_row(
            f"{fid}-{n}",
            "remeasure",
            finalist=fid,
            tokens_per_s=tps,
            cpu_shared=flag or None,
            telemetry_trusted=False if flag else None,  # as observe.annotate flags a contended window
            cpu_others_cores=1.8 if flag else 0.1,  # a window long enough to judge its CPU load
        )
        for n, (tps, flag) in enumerate(zip(speeds, flags, strict=True))
    ]


def finalists_of(rows: list[TrialRow], screen: list[TrialRow]):
    baseline = make_row(BASELINE_ID, "baseline", val_loss=2.0, feasible=True)
    return records.finalists_of({}, baseline, screen, rows, tokens=10_000)


SCREEN = [make_row("screen-1", config={"batch_size": 32}, tokens_per_s=9000.0, feasible=True, val_loss=2.0)]


def test_repeats_go_round_robin_over_the_cases():
    assert round_robin([3, 2, 1]) == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (0, 2)]
    assert round_robin([]) == []


def test_a_contended_window_asks_for_another_run_bounded_at_twice_the_repeats():
    rows = [
        make_row("a", "remeasure", case=0, repeat=0, cpu_shared=True),
        make_row("b", "remeasure", case=0, repeat=1),
        make_row("c", "remeasure", case=1, repeat=0),
    ]
    assert remeasure.more_runs(rows, [2, 1]) == [3, 1]  # one more for case 0's contended window
    rows += [make_row("d", "remeasure", case=0, repeat=2, cpu_shared=True)]
    assert remeasure.more_runs(rows, [2, 1]) == [4, 1]
    rows += [make_row("e", "remeasure", case=0, repeat=3, cpu_shared=True)]
    assert remeasure.more_runs(rows, [2, 1]) == [4, 1]  # 2 x 2: no more, however the load stays


def test_a_run_whose_process_died_is_run_again_bounded_at_twice_the_repeats():
    # Run Z: 7 of 9 re-measure runs died at once (ActorDiedError), the baseline's three among them.
    died = "ActorDiedError: The actor died unexpectedly before finishing this task."
    rows = [
        make_row("a", "remeasure", case=0, repeat=0, status="error", error=died, tokens_per_s=None),
        make_row("b", "remeasure", case=0, repeat=1, status="error", error=died, tokens_per_s=None),
        make_row("c", "remeasure", case=1, repeat=0),
    ]
    assert remeasure.more_runs(rows, [2, 1]) == [4, 1]  # two more for case 0, none for case 1
    rows += [
        make_row(x, "remeasure", case=0, repeat=r, status="error", error=died)
        for x, r in (("d", 2), ("e", 3))
    ]
    assert remeasure.more_runs(rows, [2, 1]) == [4, 1]  # 2 x 2: no more


def test_a_burst_on_some_windows_is_left_out_and_the_clean_runs_decide():
    rows = remeasured(BASELINE_ID, 1000.0, 300.0, 1010.0, contended=(False, True, False))
    rows += remeasured("screen-1", 2000.0, 2020.0, 700.0, contended=(False, False, True))
    finalists = finalists_of(rows, SCREEN)
    by_id = {f.id: f for f in finalists}
    assert by_id[BASELINE_ID].runs == [1000.0, 1010.0] and by_id[BASELINE_ID].contended_runs == [300.0]
    assert all(f.speed_trusted for f in finalists)
    assert all(f.telemetry_trusted is not False for f in finalists)  # the left-out windows don't count
    sel = pick_winner(finalists, {})
    assert not refuse_untrusted(sel, finalists)
    assert sel.winner.id == "screen-1"


@pytest.mark.parametrize("who", [BASELINE_ID, "screen-1"])
def test_no_winner_is_crowned_when_a_finalist_has_only_contended_figures(who):
    rows = remeasured(BASELINE_ID, 1000.0, 990.0, contended=(who == BASELINE_ID,) * 2)
    rows += remeasured("screen-1", 5000.0, 5100.0, contended=(who == "screen-1",) * 2)
    finalists = finalists_of(rows, SCREEN)
    assert [f.speed_trusted for f in finalists if f.id == who] == [False]
    sel = pick_winner(finalists, {})
    assert sel.winner.id == "screen-1"  # what the figures alone would say
    assert refuse_untrusted(sel, finalists)
    assert sel.winner is None and "no winner crowned on untrusted figures" in sel.reasons[-1]
    assert "screen-1" in sel.rejected


def test_windows_too_short_to_judge_are_not_trusted_where_the_load_contended_others():
    # issue 44: a window under MIN_WINDOW_S records no CPU shares; it counted as clean, so a finalist timed
    # only in such windows was trusted while the re-measure's judged windows said the machine was busy
    unjudged = {"cpu_others_cores": None}
    rows = remeasured(BASELINE_ID, 1000.0, 300.0, 1010.0, contended=(False, True, False))
    rows += [r.model_copy(update=unjudged) for r in remeasured("screen-1", 5000.0, 5100.0)]
    finalists = finalists_of(rows, SCREEN)
    assert {f.id: f.speed_trusted for f in finalists} == {BASELINE_ID: True, "screen-1": False}
    sel = pick_winner(finalists, {})
    assert refuse_untrusted(sel, finalists) and sel.winner is None
    # no window contended: the short ones say nothing of load, and a quiet machine's figures stand
    quiet = [r for r in rows if not r.contended]
    assert all(f.speed_trusted for f in finalists_of(quiet, SCREEN))


def test_the_runs_interleave_across_cases_in_time(tmp_path, shared_cpu_ray):
    """Each case has repeats of its own (the baseline more often than the finalists: search.baseline_repeats),
    and the runs interleave across the cases in time."""
    cases = [TrialSpec.of({**TOY, "seed": i}) for i in range(2)]
    rows = run_cases("p", tmp_path, cases, Placement({"cpu": 1}, 1, reuse_actors=True), repeats=[3, 2])
    assert [(r.case, r.repeat) for r in rows] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]  # case order
    assert all(r.status == "ok" and r.tokens_per_s for r in rows)
    in_time = [r.case for r in sorted(rows, key=lambda r: r.window_t0)]
    assert in_time == [0, 1, 0, 1, 0]


@pytest.mark.slow
def test_under_a_cpu_burner_contended_windows_are_repeated_then_the_baseline_stays(tmp_path, one_cpu_ray):
    # Every core busy, at the lowest priority: the trials' windows are contended all the same (the loop
    # sleeps in each step and the burners fill that), while Ray's start and the workers' imports are not
    # slowed several-fold, which at normal priority made this one test several minutes.
    burners = [
        subprocess.Popen([sys.executable, "-c", BUSY_LOOP], preexec_fn=lambda: os.nice(19)) for _ in range(2)
    ]
    try:
        time.sleep(1)
        ctx = SimpleNamespace(out=tmp_path, telemetry=Telemetry(), notices=[], inputs=TrialInputs())
        ctx.notice = ctx.notices.append  # the record's fields measure reads
        ctx.scheduler = RunScheduler(out=tmp_path, inputs=TrialInputs(), cpus_per_trial=1, observed=ctx)
        # Paced steps: a window long enough to judge its CPU load (over MIN_WINDOW_S) even when the burners
        # yield; the batch-16 case trains half the steps, and its window once came out at 0.2 s, unjudged.
        paced = {**TOY, "workload": "toy_workload:make_paced_workload"}
        cases = [TrialSpec.of({**paced, "seed": 0}), TrialSpec.of({**paced, "seed": 1, "batch_size": 16})]
        rows = remeasure.measure(ctx, cases, [1, 1], Placement({"cpu": 1}, 1, reuse_actors=True))
    finally:
        for proc in burners:
            proc.kill()
    assert all(r.cpu_shared for r in rows), [(r.cpu_own_cores, r.cpu_others_cores) for r in rows]
    assert sorted((r.case, r.repeat) for r in rows) == [(0, 0), (0, 1), (1, 0), (1, 1)]  # each once again
    assert any("timed again" in n for n in ctx.notices), ctx.notices
    for row in rows:
        row.finalist = [BASELINE_ID, "screen-1"][row.case]
    finalists = finalists_of(rows, SCREEN)
    assert not any(f.speed_trusted for f in finalists)
    sel = pick_winner(finalists, {})
    assert refuse_untrusted(sel, finalists) and sel.winner is None


def test_the_report_says_at_the_top_that_the_figures_are_untrusted_and_marks_them():
    summary = without_best(without_telemetry(synthetic_summary()))
    summary["untrusted"] = True
    for t in summary["trials"]:
        if t["phase"] == "remeasure" and t["finalist"] == BASELINE_ID:
            t["cpu_shared"] = True
    text = render_markdown(summary)
    top = text.split("## ")[0]
    assert "Not trusted: the speed figures were taken while other processes kept the machine busy" in top
    assert "The baseline (" in top and "stays the answer" in top
    table = text.split("## Configs compared")[1].split("## ")[0]
    base_row = next(line for line in table.splitlines() if line.startswith("| baseline "))
    assert "(contended)" in base_row
    assert view.CONTENDED_NOTE in table
    rows = [
        [c.strip() for c in line.strip("|").split("|")]
        for line in table.splitlines()
        if line.startswith("| ")
    ]
    tps, ratio = rows[0].index("Tok/s"), rows[0].index("vs baseline")
    assert [r[tps].endswith("(contended)") for r in rows[1:]] == [True] + [False] * (len(rows) - 2)
    assert all(r[ratio].endswith("(contended)") for r in rows[1:] if r[ratio] != "—")  # over its baseline
    html = render_html(summary)
    assert "Not trusted" in html and "(contended)" in html


def test_the_report_says_which_contended_runs_it_left_out():
    summary = without_telemetry(synthetic_summary())
    base_runs = [t for t in summary["trials"] if t["phase"] == "remeasure" and t["finalist"] == BASELINE_ID]
    base_runs[0]["cpu_shared"] = True  # one burst: that window is left out, the others give the figure
    entry = view.View.of(summary).baseline
    assert not entry.tps_contended
    assert "1 contended run left out" in entry.how["tps"]
    table = render_markdown(summary).split("## Configs compared")[1].split("## ")[0]
    assert "(contended)" not in table


def test_best_yaml_takes_the_threads_of_the_runs_that_crowned_its_config():
    rows = [
        make_row("screen-3", "screen", cpu_threads=1, compile_threads=2),
        make_row("remeasure-0", "remeasure", finalist="screen-3", cpu_threads=2, compile_threads=10),
        make_row("remeasure-1", "remeasure", finalist="screen-3", cpu_threads=2, compile_threads=10),
        make_row("screen-5", "screen", cpu_threads=1),  # never re-measured
    ]
    assert finish.measured_threads(rows, "screen-3") == {"cpu_threads": 2, "compile_threads": 10}
    assert finish.measured_threads(rows, "screen-5") == {"cpu_threads": 1}  # an eager run loads no Inductor
    assert finish.measured_threads(rows, "screen-9") == {}  # nothing recorded: the libraries' defaults


# --- the baseline's runs stop once its figure cannot change the answer (issue 44 item 7) --------------------

PLANNED = 10_000_000  # tokens of the planned run (finish_first compares times to train it)


def timed(fid: str, *speeds: float, **fields) -> list[TrialRow]:
    """Re-measure runs of `fid` in judged, uncontended windows (the CPU shares recorded), unless `fields`
    say otherwise."""
    values = {"cpu_others_cores": 0.1, "warmup_s": 10.0, **fields}
    return [
        make_row(f"{fid}-{n}", "remeasure", finalist=fid, tokens_per_s=tps, **values)
        for n, tps in enumerate(speeds)
    ]


def test_the_baseline_is_timed_no_further_when_no_finalist_but_it_is_feasible():
    alone = timed(BASELINE_ID, 1000.0)
    assert "no finalist but the baseline is feasible" in remeasure.baseline_settled(alone, PLANNED)
    failed_loss = alone + timed("screen-1", 990.0, 5000.0, feasible=False)  # near or far: it cannot win
    assert remeasure.baseline_settled(failed_loss, PLANNED) == remeasure.baseline_settled(alone, PLANNED)
    # its figure is still wanted: none yet, or only a contended one (timed again, bounded, as before)
    assert remeasure.baseline_settled(timed(BASELINE_ID, 1000.0, status="error"), PLANNED) is None
    assert remeasure.baseline_settled(timed(BASELINE_ID, 1000.0, cpu_shared=True), PLANNED) is None
    assert remeasure.baseline_settled(alone + timed("screen-1", 990.0), PLANNED) is None  # a feasible one


def test_the_baseline_is_timed_no_further_when_every_finalist_is_far_beyond_it():
    base = timed(BASELINE_ID, 1000.0, 1010.0, 990.0)
    rows = base + timed("screen-1", 3000.0, 3100.0) + timed("screen-2", 2400.0)  # over 2.25x its 1010
    why = remeasure.baseline_settled(rows, PLANNED)
    assert why is not None and "2.25x the baseline's fastest (2,400 against 1,010)" in why
    # whatever it times within 1.5x of its runs, the answer is the same config
    for extra in (1010.0 * records.REACH, 990.0 / records.REACH):
        more = rows + timed(BASELINE_ID, extra, warmup_s=0.0)
        screen = SCREEN + [make_row("screen-2", config={"batch_size": 64}, feasible=True)]
        finalists = finalists_of(more, screen)
        sel = finish_first(pick_winner(finalists, {}), finalists, PLANNED)
        assert sel.winner.id == "screen-1" and not refuse_untrusted(sel, finalists)


def test_a_close_finalist_keeps_the_baseline_timed():
    base = timed(BASELINE_ID, 1000.0, 1010.0, 990.0)
    close = base + timed("screen-1", 2200.0, 2300.0)  # under 2.25x its fastest
    assert remeasure.baseline_settled(close, PLANNED) is None
    # a baseline run 1.5x its fastest, beside a finalist's re-run 1.5x under its slowest, overlap, and the
    # simpler baseline wins: one more baseline figure decides it
    finalists = finalists_of(close + timed("screen-1", 1470.0), SCREEN)
    assert pick_winner(finalists, {}).winner.id == "screen-1"
    finalists = finalists_of(close + timed("screen-1", 1470.0) + timed(BASELINE_ID, 1515.0), SCREEN)
    assert pick_winner(finalists, {}).winner.id == BASELINE_ID
    # far beyond but one finalist close: still timed
    assert remeasure.baseline_settled(close + timed("screen-2", 9000.0), PLANNED) is None


def test_the_baseline_is_timed_where_it_could_still_finish_a_short_planned_run_first():
    rows = timed(BASELINE_ID, 1000.0, 1010.0, 990.0, warmup_s=1.0) + timed("screen-1", 3000.0, warmup_s=30.0)
    assert remeasure.baseline_settled(rows, PLANNED) is not None
    assert remeasure.baseline_settled(rows, 10_000) is None  # 30 s of warm-up outweighs a 10 s run
    finalists = finalists_of(rows, SCREEN)
    assert finish_first(pick_winner(finalists, {}), finalists, 10_000).winner.id == BASELINE_ID


def test_the_baseline_is_timed_while_a_figure_could_still_lose_its_trust():
    far = timed("screen-1", 5000.0, 5100.0)
    assert remeasure.baseline_settled(timed(BASELINE_ID, 1000.0) + far, PLANNED) is not None
    unjudged = timed(BASELINE_ID, 1000.0, cpu_others_cores=None)  # a window too short to record the load
    assert remeasure.baseline_settled(unjudged + far, PLANNED) is None
    contended = timed("screen-1", 5000.0, cpu_shared=True)  # its only figure: refuse_untrusted's to judge
    assert remeasure.baseline_settled(timed(BASELINE_ID, 1000.0) + contended, PLANNED) is None
    died = timed("screen-1", 5000.0, status="error")  # no figure of it yet
    assert remeasure.baseline_settled(timed(BASELINE_ID, 1000.0) + died, PLANNED) is None


def test_the_first_round_holds_back_the_baseline_repeats_beyond_the_finalists():
    first = remeasure.first_round
    assert first([BASELINE_ID, "screen-1", "screen-1", "screen-2"], [6, 1, 2, 3]) == [3, 1, 2, 3]
    assert first([BASELINE_ID, BASELINE_ID], [1, 5]) == [1, 0]  # alone: its profiled run first
    assert first([BASELINE_ID, "screen-1"], [2, 3]) == [2, 3]  # fewer than the finalists': all at once
    assert first([None, None], [3, 1]) == [3, 1]  # no baseline case


class FakeScheduler:
    """The re-measure's RunScheduler without Ray: each (case, repeat) asked is one run at its finalist's
    speed."""

    speeds: dict[str, float] = {}
    asked: list[list[int]] = []

    def __init__(self, ctx):
        pass

    def cases(self, phase, requests, placement, *, repeats, planned_s=None):
        FakeScheduler.asked.append(list(repeats))
        rows = []
        for i, rep in round_robin(repeats):
            fid = requests[i].spec.labels.finalist
            rows += timed(fid, FakeScheduler.speeds[fid])
            rows[-1] = rows[-1].model_copy(update={"id": f"{fid}-{i}-{rep}", "case": i, "repeat": rep})
        return sorted(rows, key=lambda r: (r.case, r.repeat))


@pytest.mark.parametrize("finalist_tps, rounds", [(5000.0, [[3, 3]]), (1500.0, [[3, 3], [6, 3]])])
def test_the_remeasure_leaves_out_the_baseline_runs_that_cannot_change_the_answer(
    monkeypatch, finalist_tps, rounds
):
    monkeypatch.setattr(FakeScheduler, "speeds", {BASELINE_ID: 1000.0, "screen-1": finalist_tps})
    monkeypatch.setattr(FakeScheduler, "asked", [])
    ctx = SimpleNamespace(notices=[], base=SimpleNamespace(tokens=PLANNED), scheduler=FakeScheduler(None))
    ctx.notice = ctx.notices.append
    cases = [TrialSpec.of(TOY, finalist=BASELINE_ID), TrialSpec.of(TOY, finalist="screen-1")]
    rows = remeasure.measure(ctx, cases, [6, 3], Placement({"cpu": 1}, 1))
    assert FakeScheduler.asked == rounds
    assert ctx.notices == []  # finish says what was left out, from the finalists' record
    finalists = records.left_out(finalists_of(rows, SCREEN), rows, PLANNED, (6, 3))
    baseline = next(f for f in finalists if f.id == BASELINE_ID)
    said = records.settled_notices(finalists)
    if len(rounds) == 1:  # far beyond: its 3 later repeats are left out, said once
        assert baseline.not_timed == 3 and baseline.settled is not None and len(said) == 1
        assert "3 of its runs not timed" in said[0] and "its figure rests on 3 runs" in said[0]
    else:  # close: all 6 timed, nothing said of re-runs either (none were contended)
        assert (baseline.not_timed, baseline.settled, said) == (0, None, [])
        assert sum(r.finalist == BASELINE_ID for r in rows) == 6


def test_a_baseline_figure_from_fewer_runs_still_makes_the_summary_and_report():
    summary = without_telemetry(synthetic_summary())
    base_runs = [t for t in summary["trials"] if t["phase"] == "remeasure" and t["finalist"] == BASELINE_ID]
    summary["trials"] = [t for t in summary["trials"] if t not in base_runs[1:]]
    entry = view.View.of(summary).baseline
    assert entry.how["tps"].startswith("one re-measure run, ")
    assert "| baseline " in render_markdown(summary) and "one re-measure run" in render_html(summary)
    winner = [f for f in finalists_of(timed("screen-1", 5000.0, 5100.0, 4900.0), SCREEN)][0]
    best = finish._best(winner, [1000.0])
    assert best.speedup == 5.0 and best.speedup_one_run == []
    assert "1 of the baseline, 3 of each needed" in best.speedup_one_run_note


def test_the_remeasure_places_its_first_round_evenly_over_the_gpus(tmp_path, monkeypatch):
    """Places sized for every run asked (15: the baseline's 6 among them) while the first round starts 12:
    Ray fills a GPU before the next, so one of 2 GPUs took 8 and timed them in turn. Sized for the 12, each
    GPU takes 6."""
    from tests.test_loss_placement import search_context

    ctx = search_context(tmp_path, gpus=2, cpus=32, gpu_mem_mb=143_771)
    screen = [
        make_row(f"screen-{i}", config={"batch_size": b}, tokens_per_s=t, feasible=True, peak_mem_mb=3_000.0)
        for i, (b, t) in enumerate([(256, 1.6e6), (128, 1.4e6), (64, 7e5)])
    ]
    seen = {}

    def measure(ctx, specs, asked, placement, planned_s=None):
        seen.update(asked=list(asked), placement=placement, specs=specs)
        return []

    monkeypatch.setattr(remeasure, "measure", measure)
    remeasure.time_finalists(remeasure_inputs(ctx, run_scheduler(ctx)), screen)
    assert sum(seen["asked"]) == 15, "the baseline 6 times, three finalists 3 times each"
    first = remeasure.first_round([s.labels.finalist for s in seen["specs"]], seen["asked"])
    assert sum(first) == 12 and seen["placement"].concurrent == 12
    shares = [
        seen["placement"].resources(s.labelled(case=i, repeat=0).as_tune())["gpu"]
        for i, s in enumerate(seen["specs"])
    ]
    assert shares == [pytest.approx(1 / 6)] * len(shares), "two GPUs of six places each: 6 and 6"
