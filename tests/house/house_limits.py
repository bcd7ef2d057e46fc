"""The checkers behind ``test_limits.py``: file length, function length, import and include
circles, each over a source tree given as a folder, so that they run on ``src/`` and on small
fake trees alike.

Every checker returns the offenders, sorted, each with its size; an empty list means the tree
holds the limit. Nothing is imported or compiled: Python is read with :mod:`ast`, C++ with a
regular expression for ``#include "..."``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

#: the suffixes of the C++ and CUDA sources and headers
CPP_SUFFIXES = (".cpp", ".cc", ".cxx", ".cu", ".h", ".hpp", ".cuh")
#: the files whose length is limited: Python and C++
SOURCE_SUFFIXES = (".py", *CPP_SUFFIXES)

_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)


def _files(root: Path, suffixes: Iterable[str]) -> Iterator[Path]:
    wanted = tuple(suffixes)
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.name.endswith(wanted) and "__pycache__" not in path.parts:
            yield path


def _line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8", errors="replace").splitlines())


def long_files(root: Path, limit: int) -> list[tuple[str, int]]:
    """Each Python or C++ file under ``root`` with more than ``limit`` lines, as (its path
    relative to ``root``, its line count)."""
    found = [(path.relative_to(root).as_posix(), _line_count(path))
             for path in _files(root, SOURCE_SUFFIXES)]
    return sorted((name, n) for name, n in found if n > limit)


def function_length(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """The lines a function spans, from its first decorator (or its ``def``) to its last line,
    both included."""
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    end = node.end_lineno if node.end_lineno is not None else node.lineno
    return end - first + 1


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.AST]]:
    """Every function in ``tree`` with its qualified name (``Class.method``,
    ``outer.inner``); nested functions are listed as well as the functions holding them."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = f"{prefix}{node.name}"
            if not isinstance(node, ast.ClassDef):
                yield name, node
            yield from _functions(node, f"{name}.")
        else:
            yield from _functions(node, prefix)


def long_functions(root: Path, limit: int) -> list[tuple[str, int]]:
    """Each Python function under ``root`` spanning more than ``limit`` lines (see
    :func:`function_length`), as (``path:qualified.name``, its line count)."""
    found = []
    for path in _files(root, (".py",)):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for name, node in _functions(tree):
            assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            n = function_length(node)
            if n > limit:
                found.append((f"{path.relative_to(root).as_posix()}:{name}", n))
    return sorted(found)


def python_modules(root: Path) -> dict[str, tuple[Path, bool]]:
    """Module name (relative to ``root``, the folder holding the top package) -> (its file,
    whether it is a package's ``__init__``)."""
    found = {}
    for path in _files(root, (".py",)):
        parts = list(path.relative_to(root).with_suffix("").parts)
        package = parts[-1] == "__init__"
        if package:
            parts = parts[:-1]
        if parts:
            found[".".join(parts)] = (path, package)
    return found


def _is_type_checking(test: ast.expr) -> bool:
    """Whether an ``if`` test is ``TYPE_CHECKING`` or ``typing.TYPE_CHECKING``."""
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def module_level_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements run when the module is imported: those at module level, in class
    bodies and in ``if``/``try``/``with`` blocks there; not those in functions, and not those
    under ``if TYPE_CHECKING:`` (its ``else`` branch does run)."""
    blocks = (ast.stmt, ast.excepthandler, ast.match_case)
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop(0)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            pending.extend(node.orelse)
        else:
            pending.extend(child for child in ast.iter_child_nodes(node)
                           if isinstance(child, blocks))


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the modules under ``root`` it imports at module level (see
    :func:`module_level_imports`). ``import P.m`` is an arrow to ``P.m``; ``from P import n``
    to ``P.n`` where that is a module, else to ``P``; relative imports are resolved. The
    implicit import of a module's own parent packages is not an arrow."""
    modules = python_modules(root)

    def known(name: str) -> str | None:
        parts = name.split(".")
        while parts:
            if ".".join(parts) in modules:
                return ".".join(parts)
            parts.pop()
        return None

    graph: dict[str, set[str]] = {}
    for module, (path, package) in modules.items():
        here = module if package else module.rpartition(".")[0]
        targets: list[str] = []
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in module_level_imports(tree):
            if isinstance(node, ast.Import):
                targets += [alias.name for alias in node.names]
                continue
            origin = node.module or ""
            if node.level:
                base = here.split(".")[: len(here.split(".")) - node.level + 1]
                origin = ".".join([*base, *([origin] if origin else [])])
            targets += [f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in modules
                        else origin for alias in node.names]
        graph[module] = {t for name in targets if (t := known(name)) is not None}
    return graph


def include_graph(root: Path) -> dict[str, set[str]]:
    """C++ file -> the C++ files under ``root`` it includes with ``#include "..."``, paths
    relative to ``root``. A name is looked for beside the including file, then in each folder
    above it up to ``root``; system includes (``<...>``) and names not found are left out."""
    files = {path.resolve(): path.relative_to(root).as_posix()
             for path in _files(root, CPP_SUFFIXES)}
    top = root.resolve()
    graph: dict[str, set[str]] = {}
    for path, name in files.items():
        targets: set[str] = set()
        for included in _INCLUDE.findall(path.read_text(encoding="utf-8", errors="replace")):
            folder = path.parent
            while True:
                candidate = (folder / included).resolve()
                if candidate in files:
                    targets.add(files[candidate])
                    break
                if folder == top or top not in folder.parents:
                    break
                folder = folder.parent
        graph[name] = targets
    return graph


def circles(graph: dict[str, set[str]]) -> list[tuple[list[str], list[str]]]:
    """The circles of ``graph``: each strongly connected component of more than one node, or a
    node with an arrow to itself, as (its nodes, sorted; one circle through them that starts
    and ends at the first node, ``[a, b, a]``)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component: set[str] = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted((sorted(c), _circle_through(graph, c)) for c in components)


def _circle_through(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """One circle inside ``component`` from its first node back to it (breadth first, so the
    shortest one)."""
    start = min(component)
    paths: dict[str, list[str]] = {start: [start]}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph.get(v, set()) & component):
            if w == start:
                return [*paths[v], start]
            if w not in paths:
                paths[w] = [*paths[v], w]
                queue.append(w)
    raise AssertionError(f"{sorted(component)} is not a strongly connected component")
