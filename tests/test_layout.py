"""The package's shape, read off its source with ``ast``: imports flow one way.

Every ``import`` counts, those under ``if TYPE_CHECKING:`` and inside functions included: a
type-only import circle is still two modules that each need the other to be read. The
checks: no cycle between trio_batcher's packages (each subpackage, and each top-level
module, one node), none between the modules of the packages whose modules depend on one
another most (``admission``, ``pipeline``, ``observatory``, ``translation``,
``upstream.resilience``), no module importing another package's private (``_``-named)
module, and no helper written twice.
"""

from __future__ import annotations

import ast
import collections
import pathlib
from collections.abc import Iterable, Mapping
from typing import Final

import pytest

PACKAGE: Final = pathlib.Path(__file__).resolve().parent.parent / "trio_batcher"
ROOT_NAME: Final = PACKAGE.name


def _modules() -> dict[str, tuple[pathlib.Path, bool]]:
    """Every module by dotted name, with its file and whether it is a package."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        found[".".join(parts)] = (path, is_package)
    return found


MODULES: Final = _modules()


def _imported(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The package's modules ``node`` (in ``module``) imports, by dotted name."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            parts = module.split(".") if is_package else module.split(".")[:-1]
            parts = parts[: len(parts) - (node.level - 1)]
            base = ".".join([*parts, *([node.module] if node.module else [])])
        # ``from package import module`` imports the module; ``from module import name`` it
        names = [
            f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
            for alias in node.names
        ]
    out = []
    for name in names:
        while name not in MODULES and "." in name:
            name = name.rsplit(".", 1)[0]
        if name in MODULES and name.split(".")[0] == ROOT_NAME:
            out.append(name)
    return out


def _graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for module, (path, is_package) in MODULES.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        edges[module] = {
            target
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for target in _imported(module, is_package, node)
            if target != module
        }
    return edges


GRAPH: Final = _graph()


def _cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _node(module: str) -> str:
    """The package-level node of ``module``: its subpackage, or itself if top-level."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _why(edges: Mapping[tuple[str, str], list[str]], cycle: list[str]) -> list[str]:
    return [
        f"{a} -> {b}: {', '.join(edges[(a, b)][:3])}"
        for a in cycle
        for b in cycle
        if (a, b) in edges
    ]


def test_the_graph_sees_type_only_and_relative_imports() -> None:
    # A sanity check on the reader itself, on imports known to exist.
    assert "trio_batcher.settings" in GRAPH["trio_batcher.runtime"]
    assert (
        "trio_batcher.translation._common.turns"
        in GRAPH["trio_batcher.translation.openai_chat._messages"]
    )
    assert "trio_batcher.pipeline.outcomes" in GRAPH["trio_batcher.pipeline.relay"]


def test_no_import_cycle_between_the_packages() -> None:
    edges: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
    packages: dict[str, set[str]] = collections.defaultdict(set)
    for module, targets in GRAPH.items():
        for target in targets:
            a, b = _node(module), _node(target)
            if a != b and a != "__init__":  # the root package's face imports what it shows
                packages[a].add(b)
                edges[(a, b)].append(f"{module} imports {target}")
    cycles = _cycles(packages)
    assert not cycles, [_why(edges, cycle) for cycle in cycles]


@pytest.mark.parametrize(
    "package", ["admission", "pipeline", "observatory", "translation", "upstream.resilience"]
)
def test_no_import_cycle_inside_the_package(package: str) -> None:
    prefix = f"{ROOT_NAME}.{package}"
    inside = {
        module: {t for t in targets if t.startswith(prefix)}
        for module, targets in GRAPH.items()
        if module.startswith(prefix)
    }
    edges = {(a, b): [f"{a} imports {b}"] for a, targets in inside.items() for b in targets}
    cycles = _cycles(inside)
    assert not cycles, [_why(edges, cycle) for cycle in cycles]


def test_no_module_reaches_into_another_packages_private_module() -> None:
    reaches = set()
    for module, targets in GRAPH.items():
        for target in targets:
            parts = target.split(".")
            for i, part in enumerate(parts):
                if part.startswith("_") and not part.startswith("__"):
                    owner = ".".join(parts[:i])  # the package the private module belongs to
                    if not (module == owner or module.startswith(f"{owner}.")):
                        reaches.add((module, target))
                    break
    assert not reaches, sorted(reaches)


def _bodies() -> dict[str, list[str]]:
    """Where each function body is written: module-level functions of two statements or
    more, methods of three or more (a docstring does not count)."""
    where: dict[str, list[str]] = collections.defaultdict(list)
    for module, (path, _) in MODULES.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        top_level = set(tree.body)
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            body = node.body
            first = body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                body = body[1:]
            if len(body) >= (2 if node in top_level else 3):
                key = ast.dump(ast.Module(body=body, type_ignores=[]))
                where[key].append(f"{module}.{node.name}")
    return where


def test_no_helper_is_written_twice() -> None:
    # The copies this catches were the Chat and Responses turn builders, and the files,
    # batches and input-items routes' own limit and JSON helpers.
    copies = [names for names in _bodies().values() if len(names) > 1]
    assert not copies, copies
