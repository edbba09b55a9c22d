"""What the README says about the project, held to the tree, the code and what it cites (issue 56 items 6 and
7): the first screen, the links, the layout, the adapters' line counts, the Quick start's timings and the
search's last lines. Files only: no search, no torch."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
LINK = re.compile(r"\]\(([^)\s]+)\)")  # a Markdown link's target
CODE = re.compile(r"`([^`]+)`")


def section(text: str, title: str) -> str:
    """The text under `## title` (a title's start is enough), up to the next `## `."""
    start = re.search(rf"^## {re.escape(title)}.*$", text, re.M)
    assert start, f"README has a '## {title}' section"
    end = re.search(r"^## ", text[start.end() :], re.M)
    return text[start.end() : start.end() + end.start()] if end else text[start.end() :]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


# --- the first screen (issue 56 item 7) ---


def test_the_first_screen_says_what_it_does_one_figure_with_its_link_then_the_quick_start():
    text = README.read_text()
    first = text[: text.index("\n## Quick start")]
    assert len(first.splitlines()) <= 15, "the Quick start is on the first screen"
    ratios = re.findall(r"\b\d[\d,.]*x\b", LINK.sub("]", first))  # not the anchors' "1x-h200"
    assert len(ratios) == 1, f"one headline figure before the Quick start, not {ratios}"
    evidence = [t for t in LINK.findall(first) if t.startswith(("docs/benchmarks.md", "docs/results"))]
    assert len(evidence) == 1, f"the headline's one link to its evidence, not {evidence}"
    assert re.search(r"20\d\d-\d\d-\d\d", first), "the headline says when it was measured"
    # what left the first screen is kept further down, not lost
    results = section(text, "Results")
    for figure in ("117.5x", "50.4x", "115.5x", "91.8x-145.3x", "47.8x", "5.07x", "2.20x", "2.79x", "1.24x"):
        assert figure in results
    assert "6.99x in images/s" in results


@pytest.mark.parametrize("doc", ["README.md", "docs/workloads.md", "docs/test-times.md", "docs/quality.md"])
def test_every_local_link_resolves_and_every_anchor_is_a_heading(doc):
    path = ROOT / doc
    broken = []
    for target in LINK.findall(path.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        file, _, anchor = target.partition("#")
        linked = (path.parent / file) if file else path
        if not linked.exists():
            broken.append(target)
        elif anchor and linked.suffix == ".md":
            headings = [line.lstrip("#") for line in linked.read_text().splitlines() if line.startswith("#")]
            if anchor not in {slug(h) for h in headings}:
                broken.append(target)
    assert broken == []


# --- the layout, drawn from the tree (issue 56 items 6 and 7) ---


def _named_paths(text: str) -> set[str]:
    """The repository paths a text names in code spans: `tuner/space/`, `model/hybrid.py` (not commands)."""
    spans = (s for s in CODE.findall(text) if " " not in s)
    return {s for s in spans if "/" in s or re.search(r"\.(py|yaml|md|json)$", s)}


def _ignored(name: str) -> bool:
    patterns = [p.strip().strip("/") for p in (ROOT / ".gitignore").read_text().splitlines() if p.strip()]
    return any(fnmatch.fnmatch(name, p) for p in patterns)


def _packages(top: str) -> list[str]:
    """The package folders under `top`: folders holding Python files."""
    return sorted(
        f"{top}/{d.name}/"
        for d in (ROOT / top).iterdir()
        if d.is_dir() and d.name != "__pycache__" and any(d.glob("*.py"))
    )


def test_the_layout_names_only_paths_that_exist():
    named = _named_paths(section(README.read_text(), "Layout"))
    assert len(named) > 30, "the layout's paths were found"
    assert sorted(p for p in named if not (ROOT / p).exists()) == []


def test_the_layout_names_every_package_and_every_top_level_folder():
    named = _named_paths(section(README.read_text(), "Layout"))
    packages = _packages("tuner") + _packages("trainables")
    assert {"tuner/space/", "tuner/session/", "trainables/common/"} <= set(packages), (
        "the packages were found"
    )
    folders = [
        f"{d.name}/"
        for d in ROOT.iterdir()
        if d.is_dir() and not d.name.startswith(".") and not _ignored(d.name)
    ]
    assert sorted(p for p in packages + folders if p not in named) == []


def test_every_project_path_the_readme_names_exists():
    """Anywhere in the README, not only its layout: a file that moved is not named at its old place."""
    tops = "|".join(
        ("model", "trainables", "tuner", "bench", "configs", "workloads", "examples", "k8s", "docs")
    )
    found = re.findall(rf"(?<![\w./~-])((?:{tops})/[\w./-]*)", README.read_text())
    paths = {p.rstrip(".,;:") for p in found}
    assert len(paths) > 40
    assert sorted(p for p in paths if not (ROOT / p).exists()) == []


# --- the adapters' line counts (issue 56 item 6) ---

# "N lines" said of a file: a link to it, then ", N lines" or " (N lines)"
LINE_CLAIM = re.compile(r"\]\(([^)\s]+\.py)\)(?:, | \()(\d+) lines\b")
LINE_COUNT = re.compile(r"\b\d[\d,]*[- ]lines?\b")


@pytest.mark.parametrize("doc", ["README.md", "docs/workloads.md"])
def test_every_line_count_is_a_files_own(doc):
    path = ROOT / doc
    text = path.read_text()
    claims = LINE_CLAIM.findall(text)
    assert len(claims) == len(LINE_COUNT.findall(text)), "every 'N lines' names the file it counts, by a link"
    assert len(claims) >= 2, "both examples' adapters are counted"
    said = {target: int(n) for target, n in claims}
    counted = {target: len((path.parent / target).read_text().splitlines()) for target in said}
    assert said == counted


# --- the timings the Quick start states (issue 56 item 6) ---

DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
# a duration: "99 s", "132-177 s", "1,148 s", "6m57s", "4 minutes", "13 min"
DURATION = re.compile(
    r"\d+m\d+s\b|\b\d[\d,.]*(?:[-–]\d[\d,.]*)? ?(?:s|seconds?|min|minutes?|h|hours?)\b(?![-/])"
)


def _evidence(date: str) -> str:
    """What docs/test-times.md (its rows of that date) and docs/benchmarks.md (its sections of that date)
    recorded on `date`, dashes made plain and bold dropped."""
    rows = [
        r for r in (ROOT / "docs" / "test-times.md").read_text().splitlines() if r.startswith(f"| {date} ")
    ]
    sections = re.split(r"^(?=## )", (ROOT / "docs" / "benchmarks.md").read_text(), flags=re.M)
    dated = [s for s in sections if date in s.split("\n", 1)[0]]
    return "\n".join(rows + dated).replace("–", "-").replace("**", "")


def test_every_time_the_quick_start_states_was_measured_on_a_date_it_names():
    quick = section(README.read_text(), "Quick start")
    paragraphs = [p for p in quick.split("\n\n") if not p.startswith("    ")]  # not the commands
    stated = 0
    for paragraph in paragraphs:
        text = paragraph.replace("–", "-").replace("**", "")
        times = DURATION.findall(text)
        if not times:
            continue
        dates = DATE.findall(text)
        assert dates, f"a time without the date it was measured: {times} in {paragraph[:80]!r}"
        evidence = "\n".join(_evidence(d) for d in dates)
        for time in times:
            stated += 1
            assert re.search(rf"(?<![\d,.]){re.escape(time)}", evidence), (
                f"{time} is not in the runs of {dates}"
            )
    assert stated >= 6, "the set-up, the smoke search, its loss check and the tests' times were found"


def test_the_quick_start_gives_no_time_as_a_bound_or_a_guess():
    quick = section(README.read_text(), "Quick start")
    vague = re.findall(r"(?:about|under|around|roughly|within|~) ?\d[\d,.]* ?(?:s|min|minutes?)\b", quick)
    assert vague == []


# --- the search's last lines (issue 56 item 6) ---


def _logged(path: str, prefix: str) -> str:
    """The f-string a module logs that starts with `prefix` (one call, found in its source)."""
    calls = re.findall(rf'\blog\(f"({re.escape(prefix)}[^"]*)"\)', (ROOT / path).read_text())
    assert len(calls) == 1, f"{path} logs one line starting {prefix!r}"
    return calls[0]


def test_the_readme_quotes_the_searchs_last_lines_as_the_code_prints_them():
    text = README.read_text()
    run_it = _logged("tuner/phases/finish.py", "run it: ")
    assert run_it.endswith(".resolve()}"), "the command names best.yaml by its absolute path"
    shown = re.findall(r"^ +(run it: python -m trainables\.train --config (\S+))$", text, re.M)
    assert shown, "the README shows the run-it line as printed"
    assert all(line.startswith(run_it.split("{")[0]) and path.startswith("/") for line, path in shown)
    # after the run-it line: the line that says why the search is not remembered, where it is not
    pipeline = (ROOT / "tuner" / "pipeline.py").read_text()
    not_kept = _logged("tuner/pipeline.py", "not remembered for a later search: ").split("{")[0]
    assert pipeline.index("finish.write(") < pipeline.index("_remember(ctx,")
    assert f"`{not_kept}…`" in text
    assert "Its last line is the command that trains" not in text
    assert "last line of every finished search is the command" not in text
