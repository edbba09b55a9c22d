"""The answer's profile (issue 36 item 4): the re-measure profiles its runs after their timed windows (real
Tune trials of the smoke model), and both reports give the answer's line beside its MFU."""

from __future__ import annotations

from pathlib import Path

from tests.factories import SMALL_SMOKE_MODEL, make_row, make_summary, search_context, synthetic_summary
from tuner.config import load_search_config
from tuner.phases import remeasure
from tuner.pipeline import remeasure_inputs, run_scheduler
from tuner.report import render_html, render_markdown
from tuner.report.profile import answer_line
from tuner.runs import observe
from tuner.state.records import BASELINE_ID

SMOKE = str(Path(__file__).resolve().parents[1] / "configs" / "smoke.yaml")


def test_the_remeasure_profiles_its_runs_after_their_windows(tmp_path, shared_cpu_ray, monkeypatch):
    """Real Tune trials of the smoke model on the CPU: the baseline and one finalist, timed once each. No
    window counts as contended (with -n 2 the other worker's tests made every one so, and each was timed
    again: 4 runs, not 2); the contended re-runs are tests/test_remeasure.py's."""
    monkeypatch.setattr(observe, "flag_cpu_contention", lambda row: row)
    overrides = [
        "search.repeats=1",
        "search.baseline_repeats=1",
        "search.remeasure_top=1",
        "search.screen_steps=4",
        *SMALL_SMOKE_MODEL,
    ]
    cfg = load_search_config(SMOKE, overrides)
    ctx = search_context(cfg, tmp_path)
    screen = [make_row("screen-0", config={"batch_size": 8}, tokens_per_s=3_000.0, feasible=True)]
    rows = remeasure.time_finalists(remeasure_inputs(ctx, run_scheduler(ctx)), screen)
    assert {r.finalist for r in rows} == {BASELINE_ID, "screen-0"}
    for row in rows:
        assert row.status == "ok" and row.steps == ctx.base.timing_warmup_steps + 4, "profiled steps counted"
    profiled = [r for r in rows if r.profile is not None]
    assert {r.finalist for r in profiled} == {"screen-0"}  # the answer's candidates, not the baseline
    for row in profiled:
        assert row.train["profile_steps"] == remeasure.PROFILE_STEPS
        assert row.profile.steps == remeasure.PROFILE_STEPS and row.profile.top_ops


def test_one_run_of_each_finalist_profiles_and_the_rest_only_time():
    """A profile holds its GPU's gate: profiling all 15 re-measure runs would queue every window behind 15
    profiles. One run per finalist profiles; the rest are plain repeats with the same finalist label. The
    baseline is not the answer, and its eager profile held the gate 30 s: none of its runs profiles."""
    finalists = [(BASELINE_ID, {}), ("screen-0", {"batch_size": 64}), ("screen-3", {"batch_size": 8})]
    cases = [{"batch_size": 8}, {"batch_size": 64}, {"batch_size": 8, "precision": "bf16"}]
    specs, asked, peaks = remeasure.profiled_once(finalists, cases, [6, 3, 1], [None, 3_839.0, 900.0])
    assert asked == [6, 1, 2, 1] and sum(asked) == 6 + 3 + 1
    assert [s.labels.finalist for s in specs] == [BASELINE_ID, "screen-0", "screen-0", "screen-3"]
    assert [s.train.profile_steps for s in specs] == [0, remeasure.PROFILE_STEPS, 0, remeasure.PROFILE_STEPS]
    assert peaks == [None, 3_839.0, 3_839.0, 900.0]  # each case sized by its finalist's screen peak
    assert specs[2].train.batch_size == 64 and specs[2].labels.knobs == {"batch_size": 64}
    # nothing screened to re-measure: the baseline is the answer, and its runs give the profile line
    specs, asked, _ = remeasure.profiled_once([(BASELINE_ID, {})], cases[:1], [3], [None])
    assert asked == [1, 2] and [s.train.profile_steps for s in specs] == [remeasure.PROFILE_STEPS, 0]


# --- the answer's line ----------------------------------------------------------------------------------

LAUNCH = {
    "bound": "launch",
    "reason": "the device was busy 31% of a step: it waits for the host (Python, launches)",
    "steps": 10,
    "step_ms": 2.1,
    "busy": 0.31,
    "compute_share": 0.42,
    "top_ops": [
        {"name": "triton_poi_fused_mul_0", "share": 0.4, "kind": "memory"},
        {"name": "sm90_xmma_gemm", "share": 0.3, "kind": "compute"},
    ],
    "measured_on": "cuda",
}


def _profiled_summary(**profile_of: dict) -> dict:
    """The synthetic H100 search, each finalist's re-measure runs profiled as `profile_of[finalist]` says, and
    MFU counted (a bf16 H100 SXM peak)."""
    data = synthetic_summary()
    for trial in data["trials"]:
        trial.update(flops_per_token=6e6, peak_flops=989.5e12, flops_source="6 x parameters")
        if trial["phase"] == "remeasure" and trial["finalist"] in profile_of:
            trial["profile"] = profile_of[trial["finalist"]]
    return data


def test_the_reports_give_the_answers_profile_beside_its_mfu():
    data = _profiled_summary(**{"screen-0": LAUNCH, "baseline": {**LAUNCH, "bound": "compute"}})
    summary = make_summary(**data)
    mfu = 1e2 * data["best"]["tokens_per_s"] * 6e6 / 989.5e12
    line = answer_line(summary)
    assert line.startswith(f"answer: launch-bound (device busy 31% of a step) at {mfu:.1f}% MFU; top ops: ")
    assert "triton_poi_fused_mul_0 40%, sm90_xmma_gemm 30%" in line and "10 steps of remeasure-" in line
    assert line in render_markdown(summary) and line in render_html(summary)


def test_no_line_where_the_answer_was_not_profiled_and_the_baseline_speaks_when_it_stays():
    assert answer_line(make_summary(**_profiled_summary())) == ""  # a summary from before profiles
    data = _profiled_summary(baseline={**LAUNCH, "bound": "memory"})
    assert answer_line(make_summary(**data)) == ""  # the winner's runs have none
    data["best"] = None
    assert answer_line(make_summary(**data)).startswith("answer: memory-bound")
