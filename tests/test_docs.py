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


_MARKER = re.compile(r"^(<{7} |>{7} |={7}$)", re.M)


@pytest.mark.parametrize(
    "doc", [*DOCS, ROOT / "README.md"], ids=[d.name for d in [*DOCS, ROOT / "README.md"]]
)
def test_no_merge_conflict_is_left_in_a_doc(doc: pathlib.Path) -> None:
    """A merge's conflict markers left in a page (one stood in the architecture tables for
    a while, with both sides of a row) are found here, not by a reader."""
    assert _MARKER.findall(doc.read_text()) == []


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


def _lines(directory: pathlib.Path) -> int:
    return sum(len(path.read_text().splitlines()) for path in directory.glob("*.py"))


def test_the_architecture_table_lists_every_package_and_its_size() -> None:
    """docs/architecture.md's package table names every package of trio_batcher, with its
    size in lines (within a fifth: the table is a map, not a count to keep to the line)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Packages", 1)[1].split("\n## ", 1)[0]
    listed: dict[str, int] = {}
    for name, lines in re.findall(r"^\| `([a-z_/]+)`[^|]*\| ([\d,]+) \|", section, re.M):
        listed[name.rstrip("/")] = int(lines.replace(",", ""))
    package = ROOT / "trio_batcher"
    actual = {
        "/".join(init.parent.relative_to(package).parts) or "trio_batcher": _lines(init.parent)
        for init in package.rglob("__init__.py")
    }
    assert set(listed) == set(actual)
    off = {
        name: (listed[name], lines)
        for name, lines in actual.items()
        if abs(listed[name] - lines) > max(lines / 5, 25)
    }
    assert off == {}


def test_the_readme_names_only_current_models() -> None:
    """Every model the README's examples use is in the bundled list of current models (a
    retired one makes the first request a user copies fail); a Bedrock id names its model
    with a ``-v1`` version after it."""
    from trio_batcher.edge.models import KNOWN_MODELS

    current = {name for name, _ in KNOWN_MODELS}
    found = re.findall(r"\bclaude-[a-z0-9-]*[a-z0-9]\b", (ROOT / "README.md").read_text())
    named = {re.sub(r"-v\d+$", "", name) for name in found}
    assert named, "the README names no model"
    assert named <= current, sorted(named - current)
