"""The project's own caps (docs/architecture.md): no module over 500 lines, no class over 150, counted from
`class` to its last line, so a room that outgrows them is split when it does, not found later."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("model", "trainables", "tuner")
MAX_MODULE_LINES, MAX_CLASS_LINES = 500, 150


def _modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py"))


def test_no_module_is_over_the_cap():
    sizes = {str(p.relative_to(REPO)): len(p.read_text().splitlines()) for p in _modules()}
    assert len(sizes) > 50, "the packages were found"
    assert {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES} == {}


def test_no_class_is_over_the_cap():
    classes = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                classes[f"{path.relative_to(REPO)}:{node.name}"] = node.end_lineno - node.lineno + 1
    assert classes["trainables/config.py:TrainConfig"] < MAX_CLASS_LINES
    assert {name: n for name, n in classes.items() if n > MAX_CLASS_LINES} == {}
