"""No import cycle in the package, not even one broken by an import inside a function.

Import-linter's layer contracts see module-level imports; a cycle hidden in a function body
(``def f(): from .other import g`` where ``other`` imports this module) passes them and still
couples two modules both ways. This walks every module's syntax tree, every import at any
depth but those under ``if TYPE_CHECKING:`` (annotations only, never run), and looks for
strongly connected components in the graph of module -> imported module.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import sits_observe

PACKAGE = Path(sits_observe.__file__).parent


def _modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _only_for_type_checkers(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def walk(node: ast.AST) -> Iterator[str]:
        for child in ast.iter_child_nodes(node):
            if _only_for_type_checkers(child):
                assert isinstance(child, ast.If)
                for other in child.orelse:
                    yield from walk(other)
                continue
            if isinstance(child, ast.Import):
                yield from (a.name for a in child.names if a.name in known)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*parts, *([child.module] if child.module else [])])
                for alias in child.names:
                    full = f"{base}.{alias.name}"
                    if full in known:
                        yield full
                    elif base in known:
                        yield base
            yield from walk(child)

    yield from walk(ast.parse(path.read_text(encoding="utf-8")))


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module (or a self-loop)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_sees_a_cycle_through_a_function_level_import(tmp_path: Path) -> None:
    a = tmp_path / "a.py"
    a.write_text("from pkg import b\n")
    b = tmp_path / "b.py"
    b.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from pkg import c\n"
        "def f():\n    from pkg.a import x\n"
    )
    c = tmp_path / "c.py"
    c.write_text("from pkg import b\n")
    known = {"pkg.a": a, "pkg.b": b, "pkg.c": c}
    graph = {name: set(_imports(name, path, known)) for name, path in known.items()}
    assert graph == {"pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}, "pkg.c": {"pkg.b"}}
    assert _cycles(graph) == [["pkg.a", "pkg.b"]]


def test_no_module_of_the_package_imports_itself_back() -> None:
    known = _modules()
    graph = {name: set(_imports(name, path, known)) - {name} for name, path in known.items()}
    assert sum(map(len, graph.values())) > len(known)  # the walk sees the imports
    assert _cycles(graph) == []
