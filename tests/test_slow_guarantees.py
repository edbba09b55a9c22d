"""docs/test-guarantees.md lists every slow test with what it alone holds (issue 44): a slow test added without
its row, or renamed, fails here, in the fast suite, before CI spends its minutes on it."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
GUARANTEES = TESTS.parent / "docs" / "test-guarantees.md"


def _marks_slow(node: ast.AST) -> bool:
    """`pytest.mark.slow`, alone or in a mark list."""
    return any(
        isinstance(n, ast.Attribute) and n.attr == "slow" and "mark" in ast.unparse(n.value)
        for n in ast.walk(node)
    )


def slow_tests(path: Path) -> list[str]:
    """The test functions of a module that the slow suite runs (in whole, or a case of their parameters):
    the module's own `pytestmark`, a `@pytest.mark.slow`, or a `pytest.param(..., marks=pytest.mark.slow)`."""
    tree = ast.parse(path.read_text())
    whole = any(
        isinstance(n, ast.Assign)
        and any(getattr(t, "id", "") == "pytestmark" for t in n.targets)
        and _marks_slow(n)
        for n in tree.body
    )
    return [
        f"{path.name}::{n.name}"
        for n in tree.body
        if isinstance(n, ast.FunctionDef)
        and n.name.startswith("test_")
        and (whole or any(_marks_slow(d) for d in n.decorator_list))
    ]


def listed() -> set[str]:
    """The tests named in the first column of the guarantees table (a parametrized case by its function)."""
    rows = [line for line in GUARANTEES.read_text().splitlines() if line.startswith("| `test_")]
    return {row.split("`")[1].split("[")[0] for row in rows}


def test_every_slow_test_has_its_row_and_every_row_a_test():
    slow = {name for path in sorted(TESTS.glob("test_*.py")) for name in slow_tests(path)}
    assert (
        len(slow) > 20
        and "test_search.py::test_smoke_search_writes_everything_and_picks_the_fastest_feasible" in slow
    )
    table = listed()
    assert sorted(slow - table) == [], "slow tests without a row in docs/test-guarantees.md"
    assert sorted(table - slow) == [], "rows of docs/test-guarantees.md that name no slow test"


def test_a_slow_mark_is_found_however_it_is_written(tmp_path):
    source = """
import pytest
@pytest.mark.slow
def test_a(): pass
@pytest.mark.parametrize("x", [pytest.param(1, marks=pytest.mark.slow), 2])
def test_b(x): pass
def test_c(): pass
"""
    path = tmp_path / "test_marks_probe.py"
    path.write_text(source)
    assert slow_tests(path) == ["test_marks_probe.py::test_a", "test_marks_probe.py::test_b"]
    path.write_text("import pytest\npytestmark = pytest.mark.slow\n" + source)
    assert len(slow_tests(path)) == 3
