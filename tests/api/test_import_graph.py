"""The package's import graph: no cycle, and no arrow from a lower layer to a higher one.

Every module under ``src/ctrlrnn`` is read with :mod:`ast` (nothing is imported): each
``import`` and ``from ... import`` anywhere in it, at module level or inside a function,
relative ones resolved, becomes an arrow to the ctrlrnn module it names (``from ctrlrnn.nn
import QRNN`` is an arrow to ``ctrlrnn.nn``; ``from ctrlrnn.nn import qrnn`` to
``ctrlrnn.nn.qrnn``). The layers, lowest first, are declared once, in :data:`LAYERS`.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

#: The layers, lowest first: a module may import its own layer and the layers below it. A
#: module belongs to the entry naming it or the package holding it (the longest such name);
#: ``ctrlrnn`` itself is the package's ``__init__``, whose re-exports sit on top.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # files, tables, progress bars, processes, how metrics are shown, checked options, the
    # extras' packages, the Ctrl-C line, timing, the settings, the CPU's description: nothing
    # of ctrlrnn's own below
    ("utilities", ("ctrlrnn.files", "ctrlrnn.tables", "ctrlrnn.progress", "ctrlrnn.processes",
                   "ctrlrnn.metric_conventions", "ctrlrnn.options", "ctrlrnn.extras",
                   "ctrlrnn.interrupts", "ctrlrnn.timing", "ctrlrnn.settings", "ctrlrnn.cpu")),
    ("ops", ("ctrlrnn.ops",)),
    ("nn", ("ctrlrnn.nn",)),
    # the layers meeting other software: torchqrnn's API, ONNX, torch.load's allow-list
    ("interop", ("ctrlrnn.compat", "ctrlrnn.onnx_export", "ctrlrnn.serialization")),
    ("models", ("ctrlrnn.models",)),
    ("data", ("ctrlrnn.data",)),
    ("tasks", ("ctrlrnn.tasks",)),
    ("train", ("ctrlrnn.train",)),
    ("reproduce", ("ctrlrnn.reproduce",)),
    ("commands", ("ctrlrnn", "ctrlrnn.__main__", "ctrlrnn.cli", "ctrlrnn.bench", "ctrlrnn.info",
                  "ctrlrnn.build")),
)

def _modules() -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, whether it is a package's ``__init__``)."""
    found = {}
    for path in sorted((SRC / "ctrlrnn").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        package = parts[-1] == "__init__"
        if package:
            parts = parts[:-1]
        found[".".join(parts)] = (path, package)
    return found


MODULES = _modules()


def _known(name: str) -> str | None:
    """The module ``name`` is, or the innermost one holding it (``ctrlrnn.nn.QRNN`` ->
    ``ctrlrnn.nn``); None outside ctrlrnn."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in MODULES:
            return ".".join(parts)
        parts.pop()
    return None


def _imports(module: str) -> set[str]:
    """The ctrlrnn modules ``module`` imports, anywhere in it."""
    path, package = MODULES[module]
    here = module if package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")[: len(here.split(".")) - node.level + 1]
                origin = ".".join([*base, *([node.module] if node.module else [])])
            else:
                origin = node.module or ""
            # ``from P import name``: the module P.name where there is one, else P
            targets = [f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in MODULES
                       else origin for alias in node.names]
        else:
            continue
        found.update(t for name in targets if (t := _known(name)) is not None)
    found.discard(module)
    return found


GRAPH = {module: _imports(module) for module in MODULES}


def layer(module: str) -> int:
    """The index in :data:`LAYERS` of ``module``'s layer."""
    best, where = "", -1
    for i, (_name, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            inside = module == prefix or (prefix != "ctrlrnn" and module.startswith(prefix + "."))
            if inside and len(prefix) > len(best):
                best, where = prefix, i
    if where < 0:
        raise AssertionError(f"{module}: in no layer; place it in LAYERS")
    return where


def _upward() -> set[tuple[str, str]]:
    return {(a, b) for a, targets in GRAPH.items() for b in targets if layer(b) > layer(a)}


def _cycles() -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(GRAPH[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    return found


def test_the_graph_is_read() -> None:
    assert len(MODULES) > 100
    assert "ctrlrnn.nn.qrnn" in GRAPH["ctrlrnn.nn"]  # from ctrlrnn.nn.qrnn import QRNN
    assert "ctrlrnn.ops.padding" in GRAPH["ctrlrnn.models.encoders"]


def test_every_module_is_in_a_layer() -> None:
    for module in MODULES:
        layer(module)


def test_no_import_cycle() -> None:
    cycles = [sorted(c) for c in _cycles()]
    assert cycles == [], f"modules importing each other: {cycles}"


def test_no_import_from_a_higher_layer() -> None:
    names = [name for name, _ in LAYERS]
    upward = sorted(_upward())
    described = [f"{a} ({names[layer(a)]}) imports {b} ({names[layer(b)]})" for a, b in upward]
    assert described == [], "imports from a higher layer:\n" + "\n".join(described)
