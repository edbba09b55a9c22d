"""The range in which one run of the winner and one of the baseline, outside the search, should put their
speed ratio (tuner/decide/ratio.py)."""

import math
import statistics

import pytest

from tuner.decide.ratio import one_run_ratio_range, t_975
from tuner.report.fmt import one_run_text


def test_t_quantile_reads_the_table_at_or_below_the_degrees_of_freedom():
    assert t_975(2) == 4.303 and t_975(2.9) == 4.303  # rounded down: wider, never narrower
    assert t_975(22) == 2.086 and t_975(1000) == 1.960
    with pytest.raises(ValueError):
        t_975(0.5)


def test_one_run_range_is_the_log_scale_prediction_interval_around_the_speedup():
    best, base = [700.0, 690.0, 710.0], [10.0, 11.0, 12.0, 9.0, 10.5, 11.5]
    lo, hi = one_run_ratio_range(best, base, center=67.0)
    terms = [statistics.variance([math.log(v) for v in xs]) * (1 + 1 / len(xs)) for xs in (best, base)]
    df = sum(terms) ** 2 / (terms[0] ** 2 / 2 + terms[1] ** 2 / 5)
    half = t_975(df) * math.sqrt(sum(terms))
    assert lo == pytest.approx(67.0 * math.exp(-half)) and hi == pytest.approx(67.0 * math.exp(half))
    assert math.sqrt(lo * hi) == pytest.approx(67.0)  # symmetric on the log scale


def test_more_baseline_runs_narrow_the_range_and_noisier_ones_widen_it():
    best = [700.0, 690.0, 710.0]
    three = one_run_ratio_range(best, [10.0, 11.0, 12.0], 64.0)
    six = one_run_ratio_range(best, [10.0, 11.0, 12.0] * 2, 64.0)
    noisy = one_run_ratio_range(best, [8.0, 11.0, 14.0] * 2, 64.0)

    def width(r):
        return r[1] / r[0]

    assert width(six) < width(three)
    assert width(noisy) > width(six)


@pytest.mark.parametrize(
    "best, base",
    [
        ([700.0], [10.0, 11.0, 12.0]),
        ([700.0, 710.0], [10.0, 11.0, 12.0]),
        ([700.0, 710.0, 720.0], [10.0, 11.0]),
        ([700.0, 700.0, 700.0], [10.0, 10.0, 10.0]),
        ([700.0, 0.0, 710.0], [10.0, 11.0, 12.0]),
    ],
)
def test_no_range_without_three_runs_of_each_or_without_any_spread(best, base):
    assert one_run_ratio_range(best, base, 70.0) is None


def test_with_two_repeats_the_report_says_there_are_too_few_runs_for_a_range():
    # issue 23: repeats 2 printed "0.3x-16.6x at 95%", a t interval on one degree of freedom
    from tuner.decide.ratio import too_few_runs
    from tuner.state.records import Best

    note = too_few_runs([700.0, 650.0], [10.0, 11.0, 12.0])
    assert note.startswith("no range for one run of each outside the search: 2 run(s) of it and 3")
    assert one_run_text(Best(id="x", speedup=66.0, speedup_one_run_note=note)) == note
    assert too_few_runs([700.0, 650.0, 690.0], [10.0, 11.0, 12.0]) is None


def test_the_winners_record_and_the_report_carry_the_range():
    from test_report import SUMMARY, rendered

    from tuner.phases.finish import _best
    from tuner.state.records import Finalist

    winner = Finalist(id="screen-3", config={"batch_size": 64}, runs=[680e3, 682e3, 668e3], feasible=True)
    best = _best(winner, [14.8e3, 13.7e3, 13.2e3, 15.1e3, 14.0e3, 13.9e3])
    assert best.speedup == round(680e3 / 13.95e3, 3)
    lo, hi = best.speedup_one_run
    assert lo < best.speedup < hi and math.sqrt(lo * hi) == pytest.approx(best.speedup, rel=1e-3)
    answer = rendered({**SUMMARY, "best": {**SUMMARY["best"], "speedup_one_run": [1.5, 2.25]}}).split("\n\n")[
        1
    ]
    assert (
        "1.84x the baseline's 30,000 tok/s (one run of each outside the search: 1.5x–2.2x at 95%)" in answer
    )
    assert "outside the search" not in rendered(SUMMARY)
