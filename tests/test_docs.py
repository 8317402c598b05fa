"""The docs' promises point at real tests: every test a doc names must exist."""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md"))
_NAMED = re.compile(r"`?(test_[a-z0-9_]+\.py)::(test_[A-Za-z0-9_]+)")


def _tests_in(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.startswith("test_")
    }


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_every_test_a_doc_names_exists(doc: pathlib.Path) -> None:
    missing = []
    for file, name in _NAMED.findall(doc.read_text()):
        path = ROOT / "tests" / file
        if not path.exists() or name not in _tests_in(path):
            missing.append(f"{file}::{name}")
    assert missing == []


def test_cancellation_table_names_a_test_in_every_row() -> None:
    text = (ROOT / "docs" / "cancellation.md").read_text()
    rows = [
        line
        for line in text.splitlines()
        if line.startswith("| ") and not line.startswith("| Phase")
    ]
    rows = [r for r in rows if not set(r) <= set("|- ")]
    assert len(rows) >= 20
    assert all(_NAMED.search(row) for row in rows)
