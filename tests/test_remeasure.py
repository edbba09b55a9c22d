"""Measurement that load cannot steer: the re-measure interleaves its repeats over the configs and the
baseline, times a contended window again (bounded), and the search crowns no winner on contended figures.

The Ray tests run real Ray Tune trials of the toy workload in this process; the CPU burner is real busy
processes on every core, the contention flag the one the search computes from psutil."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import ray
from toy_workload import TOY

from tests.factories import make_row, synthetic_summary, without_best, without_telemetry
from trainables.spec import TrialSpec
from tuner.context import Telemetry
from tuner.phases import finish, remeasure
from tuner.records import BASELINE_ID, TrialRow
from tuner.report import render_html, render_markdown, view
from tuner.runs.request import Placement, TrialInputs
from tuner.runs.tune import round_robin, run_cases
from tuner.select import pick_winner, refuse_untrusted

TESTS = Path(__file__).resolve().parent
BUSY_LOOP = "import time\nend = time.time() + 600\nwhile time.time() < end: pass\n"


@pytest.fixture
def one_cpu_ray(monkeypatch):
    monkeypatch.chdir(TESTS)  # workers get the driver's cwd on sys.path: toy_workload imports
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield
    ray.shutdown()


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
        )
        for n, (tps, flag) in enumerate(zip(speeds, flags, strict=True))
    ]


def finalists_of(rows: list[TrialRow], screen: list[TrialRow]):
    baseline = make_row(BASELINE_ID, "baseline", val_loss=2.0, feasible=True)
    return finish._finalists({}, baseline, screen, rows, tokens=10_000)


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


def test_the_runs_interleave_across_cases_in_time(tmp_path, one_cpu_ray):
    cases = [TrialSpec.of({**TOY, "seed": i}) for i in range(2)]
    rows = run_cases("p", tmp_path, cases, Placement({"cpu": 1}, 1, reuse_actors=True), repeats=[3, 2])
    assert [(r.case, r.repeat) for r in rows] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]  # case order
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
        ctx.notice = ctx.notices.append
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
