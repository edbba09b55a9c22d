"""The loss rule (tuner/rules/loss_limit.py), said the same everywhere (issue 43 item 6): limit = the baseline's loss
(the mean of its seeds) + the tolerance, absolute or relative, and nothing else; the sentence every output
uses states those numbers; a workload may declare its own scale, which a config's own setting beats."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from tests.factories import synthetic_summary
from trainables.config import ConfigError
from trainables.workloads.loss_tolerance import declared_tolerance
from tuner import search
from tuner.config import QualitySection, SearchConfig, load_search_config
from tuner.report.html import render_html
from tuner.report.markdown import render_markdown
from tuner.rules.horizon import LossHorizon
from tuner.rules.loss_limit import LossLimit

SMOKE = str(Path(__file__).resolve().parents[1] / "configs" / "smoke.yaml")
PREFIX = LossHorizon(planned_tokens=1_000_000, tokens=100_000, step_tokens=4096)


def test_absolute_the_limit_is_the_baseline_plus_the_tolerance():
    loss_limit = LossLimit.of(1.7412, 0.05, "absolute")
    assert loss_limit.limit == pytest.approx(1.7912) and loss_limit.allowance == pytest.approx(0.05)
    assert loss_limit.passes(1.7912) and not loss_limit.passes(1.7913)


def test_relative_the_limit_is_the_baseline_times_one_plus_the_tolerance():
    loss_limit = LossLimit.of(0.0612, 0.05, "relative")
    assert loss_limit.limit == pytest.approx(0.0612 * 1.05)
    assert loss_limit.passes(0.0642) and not loss_limit.passes(0.0644)


def test_two_seeds_the_limit_is_their_mean_plus_the_tolerance_and_their_spread_is_shown_not_added():
    loss_limit = LossLimit.of(1.70, 0.05, "absolute", PREFIX, [1.80])
    assert loss_limit.baseline_loss == pytest.approx(1.75) and loss_limit.noise == pytest.approx(0.10)
    assert loss_limit.limit == pytest.approx(1.80), "not 1.90: the spread does not widen the limit"
    assert not loss_limit.passes(1.85)
    text = loss_limit.sentence()
    assert "mean of its 2 seeds' 1.7000 and 1.8000" in text and "spread 0.1000 is shown, not added" in text
    relative = LossLimit.of(2.0, 0.1, "relative", PREFIX, [2.2])
    assert relative.limit == pytest.approx(2.1 * 1.1)


def _numbers(sentence: str) -> tuple[float, float, float]:
    found = re.match(r"limit (\S+) = baseline (\S+) (?:\+ (\S+),|x \(1 \+ (\S+)\),)", sentence)
    assert found, sentence
    limit, base, plus, times = found.groups()
    return float(limit), float(base), float(plus or times)


@pytest.mark.parametrize(
    ("loss", "tolerance", "mode"),
    [(1.7412, 0.05, "absolute"), (0.0612, 0.05, "relative"), (3.21987, 0.1, "relative")],
)
def test_the_sentence_states_the_numbers_the_limit_was_made_of(loss, tolerance, mode):
    loss_limit = LossLimit.of(loss, tolerance, mode, tolerance_from="config")
    limit, base, tol = _numbers(loss_limit.sentence())
    assert limit == pytest.approx(loss_limit.limit, abs=5e-5) and base == pytest.approx(loss, abs=5e-5)
    assert tol == tolerance
    made = base + tol if mode == "absolute" else base * (1 + tol)
    assert limit == pytest.approx(made, abs=1.5e-4), "the arithmetic as printed holds"
    assert f"the {mode} tolerance set in the config" in loss_limit.sentence()


def test_an_older_summarys_widened_limit_is_stated_with_the_spread_it_held():
    older = LossLimit(
        baseline_loss=1.53, tolerance=0.05, mode="absolute", limit=1.64, seed_losses=[1.5, 1.56], noise=0.06
    )
    text = older.sentence()
    assert (
        text.startswith("limit 1.6400 = baseline 1.5300 + 0.05 + 0.0600 (the seeds' spread")
        and "not added" not in text
    )


def test_the_reports_and_the_summary_state_the_rule_the_code_applied():
    loss_limit = LossLimit.of(1.50, 0.05, "absolute", PREFIX, [1.52], tolerance_from="workload")
    summary = {**synthetic_summary(), "loss_limit": loss_limit.model_dump()}
    said = "limit 1.5600 = baseline 1.5100 + 0.05, the absolute tolerance the workload declared"
    assert said in render_markdown(summary)
    assert said in render_html(summary)
    assert loss_limit.model_dump()["tolerance_from"] == "workload" and loss_limit.limit == pytest.approx(1.56)


# --- where the tolerance comes from -------------------------------------------------------------------------


def test_the_workloads_scale_stands_in_only_where_the_config_sets_no_tolerance():
    plain = QualitySection()
    assert plain.tolerance_from == "default"
    taken = plain.with_workload_default(("relative", 0.05))
    assert (taken.mode, taken.tolerance, taken.tolerance_from) == ("relative", 0.05, "workload")
    assert taken.loss_limit(0.06).limit == pytest.approx(0.063)
    for own in (QualitySection(tolerance=0.02), QualitySection(mode="absolute")):
        assert own.tolerance_from == "config"
        assert own.with_workload_default(("relative", 0.05)) == own, "the config's own setting wins"
    assert plain.with_workload_default(None) == plain
    kept = SearchConfig(**SearchConfig(quality=taken).model_dump())  # as state.json keeps it for --resume
    assert kept.quality == taken
    assert load_search_config(SMOKE).quality.tolerance_from == "config"  # smoke.yaml sets quality.tolerance


class Scaled:
    loss_tolerance = ("relative", 0.05)


@pytest.mark.parametrize(
    "bad", [("relative",), ("percent", 0.05), ("relative", -1), ("absolute", "0.05"), 0.05]
)
def test_a_bad_loss_tolerance_is_one_line_naming_it(bad):
    class Bad:
        loss_tolerance = bad

    with pytest.raises(ConfigError, match=r"workload 'w': loss_tolerance is .*'absolute' or 'relative'"):
        declared_tolerance(Bad(), "w")
    assert (
        declared_tolerance(Scaled(), "w") == ("relative", 0.05) and declared_tolerance(object(), "w") is None
    )


JOB = """
from toy_workload import ToyWorkload


class Classifier(ToyWorkload):
    loss_tolerance = ("relative", 0.05)
    reads_corpus = True  # the search resolves --data for it (the toy ignores the text)


def make_workload(cfg):
    return Classifier(cfg)
"""
CONFIG = """
train: {workload: "job.py:make_workload", seq_len: 16, batch_size: 8, tokens: 768, eval_interval: 0,
        device: cpu, timing_warmup_steps: 2, log_interval: 2}
search: {space: {batch_size: [8, 16]}}
"""


@pytest.mark.parametrize(("sets", "said"), [([], ("relative", 0.05, "workload")),
                                            (["quality.tolerance=0.02"], ("absolute", 0.02, "config"))])  # fmt: skip
def test_the_search_reads_the_workloads_scale_in_the_driver_and_the_config_beats_it(
    tmp_path, monkeypatch, sets, said
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.py").write_text(JOB)
    (tmp_path / "search.yaml").write_text(CONFIG)
    (tmp_path / "corpus.txt").write_text("the quick brown fox jumps over the lazy dog\n" * 3000)
    argv = ["--config", "search.yaml", "--out", str(tmp_path / "out"), "--data", "corpus.txt"]
    args = search.build_parser().parse_args(argv + [a for s in sets for a in ("--set", s)])
    cfg, _, info = search.read_config(args, tmp_path / "out")
    assert info.loss_tolerance == ("relative", 0.05)
    assert (cfg.quality.mode, cfg.quality.tolerance, cfg.quality.tolerance_from) == said


def test_the_help_names_both_modes_and_the_workloads_default():
    text = search.build_parser().format_help()
    assert "limit = baseline + quality.tolerance" in text
    assert "limit = baseline x (1 + quality.tolerance)" in text
    assert "quality.mode relative" in text and "loss_tolerance" in text and "not added" in text


# --- a tolerance that does not fit the loss's scale (issue 56 item 4) --------------------------------------

# The classifier: baseline 0.0286, limit 0.0786 by the absolute 0.05 default, a 2.7x worse loss passing.
DWARFED = (
    "limit 0.0786 = baseline 0.0286 + 0.05, the absolute tolerance by default, as neither the config nor the "
    "workload sets one, 175% of the baseline's loss: more than the 25% that fits its scale"
)


def test_an_absolute_tolerance_above_a_quarter_of_the_baseline_loss_is_said_and_the_report_says_why():
    small = LossLimit.of(0.0286, 0.05, "absolute", tolerance_from="default")
    assert small.sentence().startswith(DWARFED)
    summary = {**synthetic_summary(), "loss_limit": small.model_dump()}
    assert DWARFED in render_markdown(summary) and DWARFED in html.unescape(render_html(summary))
    assert small.model_dump()["allowance_share"] == pytest.approx(0.05 / 0.0286)
    fits = [
        LossLimit.of(1.7412, 0.05, "absolute", tolerance_from="default"),  # an LM's: 3%
        LossLimit.of(0.21, 0.05, "absolute"),  # 24%
        LossLimit.of(0.0286, 0.05, "relative", tolerance_from="workload"),  # its own scale, whatever the loss
    ]
    assert all("fits its scale" not in f.sentence() for f in fits)
    assert (
        LossLimit.of(1.7412, 0.05, "absolute", tolerance_from="default")
        .sentence()
        .endswith("the absolute tolerance by default, as neither the config nor the workload sets one")
    )


def test_the_baselines_loss_check_says_the_tolerance_outscales_its_loss_as_a_notice():
    """Where the limit is first set (tuner/measure/baseline.py:checked), one line, once, as a notice: the
    report lists the search's notices."""
    from factories import make_row

    from trainables.config import TrainConfig
    from tuner.measure import baseline
    from tuner.rules.horizon import horizon_for
    from tuner.runs.shapes import RunShapes

    base = TrainConfig()
    shapes = RunShapes(base, 8, horizon_for(base, {}, None))
    said: list[str] = []
    for loss, quality in (
        (0.0286, QualitySection()),
        (1.74, QualitySection()),
        (0.0286, QualitySection(mode="relative")),
    ):
        rule = baseline.BaselineLoss(shapes, quality, said.append)
        baseline.checked(rule, make_row("baseline", phase="baseline", val_loss=loss))
    assert said == [
        "the loss limit 0.0786 passes a val loss up to 2.7x the baseline's 0.0286: the absolute tolerance 0.05 "
        "by default is 175% of that loss, more than the 25% that fits its scale; --set quality.mode=relative "
        "makes the limit 0.0300 (5% above it), or set a smaller quality.tolerance"
    ]
