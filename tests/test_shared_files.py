"""tests/shared_files.py: a file of ../shared that is not there skips a test in a clone and fails it where CI
requires ../shared (TUNER_REQUIRE_SHARED=1), so the recorded case cannot skip unseen in CI."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import shared_files


def test_a_missing_shared_file_skips_unless_required_then_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(shared_files, "SHARED", tmp_path)
    monkeypatch.delenv(shared_files.REQUIRED, raising=False)
    with pytest.raises(pytest.skip.Exception, match="cases/none.json is not beside this checkout"):
        shared_files.shared_file("cases", "none.json")
    monkeypatch.setenv(shared_files.REQUIRED, "1")
    with pytest.raises(pytest.fail.Exception, match="TUNER_REQUIRE_SHARED=1: ../shared/cases/none.json"):
        shared_files.shared_file("cases", "none.json")
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "none.json").write_text("{}")
    assert shared_files.shared_file("cases", "none.json") == tmp_path / "cases" / "none.json"


def test_ci_requires_shared_where_it_is_beside_the_checkout():
    text = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    assert "if [ -d ../shared ]; then export TUNER_REQUIRE_SHARED=1; fi" in text
    assert text.index("TUNER_REQUIRE_SHARED=1") < text.index("python -m pytest")


# The folders and files a clone runs or reads (recorded results under docs/ keep the paths they ran at).
SOURCES = ("model", "trainables", "tuner", "tests", "bench", "examples", "workloads", "configs", "k8s", ".ci")
MACHINE_ROOTS = tuple(f"/{name}/" for name in ("work", "root"))  # this project's machines' folders


def test_no_source_names_a_folder_of_one_machine():
    repo = Path(__file__).resolve().parents[1]
    found = (p for folder in SOURCES for p in (repo / folder).rglob("*") if p.is_file())
    files = [p for p in found if "__pycache__" not in p.parts]  # bytecode names where it was compiled
    files += [repo / "README.md", repo / "pyproject.toml"]
    assert len(files) > 100, "the sources were found"
    named = {}
    for path in files:
        try:
            text = path.read_text()
        except UnicodeDecodeError:  # a binary file (a vendored schema, a tuning result)
            continue
        hits = [root for root in MACHINE_ROOTS if root in text]
        if hits:
            named[str(path.relative_to(repo))] = hits
    assert named == {}
