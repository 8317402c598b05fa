"""The package's layout, checked against the tree: where the seams are, and that nothing
reaches across them (STYLE.md, Layout).

Imports are read with ``ast``, so every import counts: module level, inside functions, and
under ``if TYPE_CHECKING:`` (a type-only cycle still ties two modules into one room).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

import trio_batcher

PACKAGE = Path(trio_batcher.__file__).parent
ROOT = "trio_batcher"

# Packages in which no module may take part in an import cycle.
NO_CYCLES = (
    "trio_batcher.admission",
    "trio_batcher.pipeline",
    "trio_batcher.observatory",
    "trio_batcher.upstream.resilience",
)

# Known cycles outside the admission/pipeline/resilience seams, each with who removes it.
# Remove an entry when its cycle is gone.
ALLOWED_CYCLES: frozenset[frozenset[str]] = frozenset(
    {
        # The observatory's rework (h-obs) splits the snapshot from the registry.
        frozenset({"trio_batcher.observatory.metrics", "trio_batcher.observatory.snapshot"}),
    }
)

# Known imports of another package's private module, each with who removes it. None may be
# in admission/, pipeline/ or upstream/resilience/. Remove an entry when its import is gone.
ALLOWED_PRIVATE: frozenset[tuple[str, str]] = frozenset(
    {
        # The translation helper (h-trans) moves what the Responses dialect shares with
        # Chat into a shared module, instead of importing Chat's private ones.
        *(
            ("trio_batcher.translation.openai_responses." + importer, "trio_batcher." + imported)
            for importer, imported in (
                ("_conversation", "translation.openai_chat._content"),
                ("_conversation", "translation.openai_chat._messages"),
                ("_params", "translation.openai_chat._fields"),
                ("_params", "translation.openai_chat._structured_output"),
                ("_tools", "translation.openai_chat._tools"),
                ("request", "translation.openai_chat._content"),
                ("request", "translation.openai_chat._fields"),
                ("request", "translation.openai_chat._params"),
                ("request", "translation.openai_chat._preflight"),
                ("request", "translation.openai_chat._reasoning"),
                ("request", "translation.openai_chat._sampling"),
            )
        ),
        # Batch status and splitting, read by the observatory and the offline poller: the
        # translation helper (h-trans) gives openai_batch a public face for them.
        (
            "trio_batcher.observatory.batch_status",
            "trio_batcher.translation.openai_batch._status",
        ),
        ("trio_batcher.offline._submit", "trio_batcher.translation.openai_batch._split"),
        # The spend store's SQLite plumbing (the stored-state helper, h-state).
        ("trio_batcher.tenants.sqlite_spend", "trio_batcher.store._sqlite"),
    }
)


def _modules() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = [ROOT, *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _imports(package: str, source: str, known: Iterable[str]) -> Iterator[str]:
    """The modules of ``known`` that ``source`` (a module of ``package``) imports, wherever
    the import statement is."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            if not target.startswith(ROOT):
                continue
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                yield submodule if submodule in known else target


def _graph() -> dict[str, set[str]]:
    known = _modules()
    return {
        module: {
            target
            for target in _imports(_package_of(module, path), path.read_text(), known)
            if target != module
        }
        for module, path in known.items()
    }


def _cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _private_reaches(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Imports of a private module (or of anything under a private package) from outside
    the package that holds it: ``a.b._c`` is ``a.b``'s own, for ``a.b`` and what is in it."""
    reaches: set[tuple[str, str]] = set()
    for importer, targets in graph.items():
        for target in targets:
            parts = target.split(".")
            for i, part in enumerate(parts):
                owner = ".".join(parts[:i])
                if part.startswith("_") and not _inside(importer, owner):
                    reaches.add((importer, target))
    return reaches


def test_the_import_reader_sees_every_kind_of_import() -> None:
    source = """
from typing import TYPE_CHECKING
import trio_batcher.errors
from . import sibling
from ..other import _private, name
if TYPE_CHECKING:
    from .core import Thing
def late() -> None:
    from trio_batcher.deep.mod import x
"""
    known = {
        "trio_batcher.errors",
        "trio_batcher.pkg.sibling",
        "trio_batcher.pkg.core",
        "trio_batcher.other",
        "trio_batcher.other._private",
        "trio_batcher.deep.mod",
    }
    assert set(_imports("trio_batcher.pkg", source, known)) == known
    assert "trio_batcher.admission._dispatcher" in _graph()["trio_batcher.admission.dispatch"]
    # The rules as stated: a private module is its package's, subpackages included.
    assert _private_reaches({"a.x.m": {"a._y"}, "a.b.m": {"a.c._z", "a.b._w"}}) == {
        ("a.b.m", "a.c._z")
    }
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [frozenset({"a", "b"})]


def test_no_import_cycle_in_admission_pipeline_observatory_or_resilience() -> None:
    graph = _graph()
    cycles = {
        cycle
        for cycle in _cycles(graph)
        if any(_inside(module, package) for module in cycle for package in NO_CYCLES)
    }
    assert cycles <= ALLOWED_CYCLES, sorted(sorted(c) for c in cycles - ALLOWED_CYCLES)


def test_no_module_reaches_into_another_packages_private_module() -> None:
    reaches = _private_reaches(_graph())
    assert reaches <= ALLOWED_PRIVATE, sorted(reaches - ALLOWED_PRIVATE)


def test_the_allow_lists_spare_admission_pipeline_and_resilience() -> None:
    mine = ("trio_batcher.admission", "trio_batcher.pipeline", "trio_batcher.upstream.resilience")
    allowed = {m for pair in ALLOWED_PRIVATE for m in pair} | {
        m for cycle in ALLOWED_CYCLES for m in cycle
    }
    assert not [m for m in allowed if any(_inside(m, package) for package in mine)]
