"""Every summary.json recorded under docs/results/ (searches of many versions, since the first GPU runs) still
loads as today's `Summary` and renders its report (issue 45: a restructure keeps every recorded summary
readable by `python -m tuner.report OUT`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tuner.report import render_markdown
from tuner.state.records import Summary

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
RECORDED = sorted(RESULTS.rglob("summary.json"))


def test_the_recorded_summaries_are_found():
    assert len(RECORDED) >= 50, RECORDED


@pytest.mark.parametrize("path", RECORDED, ids=[str(p.parent.relative_to(RESULTS)) for p in RECORDED])
def test_a_recorded_summary_loads_and_renders(path):
    summary = Summary.model_validate(json.loads(path.read_text()))
    text = render_markdown(summary)
    assert text.startswith("#") and "## " in text
