"""The size and shape limits of ``src/`` (issue 72, item 5), held by the suite so they cannot
slip back: no file over 600 lines (Python, C++ and headers), no Python function over 80 lines,
no import circle among ``ctrlrnn``'s modules at module level, no ``#include`` circle among the
C++ files.

A function's length is the lines it spans from its first decorator (or its ``def``) to its
last line, both included. The import graph holds the imports run when a module is imported:
not those inside functions, and not those under ``if TYPE_CHECKING:``. The checkers live in
``house_limits.py``; the tests at the end of this file run each on a small fake tree.
"""

from __future__ import annotations

from pathlib import Path

from house_limits import (
    circles,
    function_length,
    import_graph,
    include_graph,
    long_files,
    long_functions,
)

SRC = Path(__file__).resolve().parents[2] / "src"

#: the most lines a source file may have
FILE_LINES = 600
#: the most lines a function may span
FUNCTION_LINES = 80


def _listing(offenders: list[tuple[str, int]], unit: str) -> str:
    return "\n".join(f"  {name}: {n} {unit}" for name, n in offenders)


def _circle_listing(found: list[tuple[list[str], list[str]]], unit: str) -> str:
    return "\n".join(f"  {len(nodes)} {unit}: {', '.join(nodes)}; one circle: "
                     f"{' -> '.join(circle)}" for nodes, circle in found)


def test_no_file_over_the_line_limit() -> None:
    found = long_files(SRC, FILE_LINES)
    assert not found, f"files over {FILE_LINES} lines:\n{_listing(found, 'lines')}"


def test_no_function_over_the_line_limit() -> None:
    found = long_functions(SRC, FUNCTION_LINES)
    assert not found, f"functions over {FUNCTION_LINES} lines:\n{_listing(found, 'lines')}"


def test_no_import_circle() -> None:
    graph = import_graph(SRC)
    assert "ctrlrnn.nn.qrnn" in graph["ctrlrnn.nn"], "the graph was not read"
    found = circles(graph)
    assert not found, f"modules importing each other:\n{_circle_listing(found, 'modules')}"


def test_no_include_circle() -> None:
    graph = include_graph(SRC)
    assert any(graph.values()), "no #include was read"
    found = circles(graph)
    assert not found, f"C++ files including each other:\n{_circle_listing(found, 'files')}"


# The checkers on fake trees.


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def test_long_files_counts_python_and_cpp(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "pkg/short.py": "x = 1\n" * 3,
        "pkg/long.py": "x = 1\n" * 4,
        "csrc/long.cpp": "int x;\n" * 5,
        "csrc/long.h": "int y;\n" * 4,
        "csrc/short.cu": "int z;\n" * 3,
        "notes.txt": "words\n" * 9,
    })
    assert long_files(root, 3) == [("csrc/long.cpp", 5), ("csrc/long.h", 4), ("pkg/long.py", 4)]
    assert long_files(root, 5) == []


def test_long_functions_counts_decorators_methods_and_nested(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(5))
    source = (
        "import functools\n"
        "\n"
        "@functools.lru_cache\n"         # line 3: the span starts here
        "@staticmethod\n"
        f"def decorated():\n{body}\n"    # def at 5, body 6-10
        "\n"
        "class Holder:\n"
        "    def method(self):\n"        # 13
        "        def inner():\n"         # 14
        "            return 1\n"
        "        return inner\n"         # 16
        "async def tiny():\n"
        "    return 2\n"
    )
    root = _tree(tmp_path, {"pkg/mod.py": source})
    assert long_functions(root, 3) == [("pkg/mod.py:Holder.method", 4),
                                       ("pkg/mod.py:decorated", 8)]
    assert long_functions(root, 8) == []
    assert long_functions(root, 1) == [("pkg/mod.py:Holder.method", 4),
                                       ("pkg/mod.py:Holder.method.inner", 2),
                                       ("pkg/mod.py:decorated", 8), ("pkg/mod.py:tiny", 2)]


def test_function_length_without_decorators() -> None:
    import ast

    node = ast.parse("def f():\n    a = 1\n    return a\n").body[0]
    assert isinstance(node, ast.FunctionDef)
    assert function_length(node) == 3


def test_import_graph_reads_module_level_imports_only(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "pkg/__init__.py": "from pkg.a import A\n",
        "pkg/a.py": (
            "from typing import TYPE_CHECKING\n"
            "import os\n"
            "from . import b\n"                      # relative, a module: pkg.b
            "if TYPE_CHECKING:\n"
            "    from pkg.c import C\n"              # not run
            "else:\n"
            "    from pkg.sub import helper\n"       # run: a name in pkg.sub's __init__
            "try:\n"
            "    import pkg.sub.deep\n"
            "except ImportError:\n"
            "    from pkg import c\n"
            "def f():\n"
            "    from pkg import d\n"                # inside a function: not an arrow
            "class K:\n"
            "    from pkg.e import E\n"              # a class body runs at import
            "A = 1\n"
        ),
        "pkg/b.py": "", "pkg/c.py": "", "pkg/d.py": "", "pkg/e.py": "",
        "pkg/sub/__init__.py": "def helper(): pass\n",
        "pkg/sub/deep.py": "from ..b import *\n",
    })
    graph = import_graph(root)
    assert graph["pkg"] == {"pkg.a"}
    assert graph["pkg.a"] == {"pkg.b", "pkg.sub", "pkg.sub.deep", "pkg.c", "pkg.e"}
    assert graph["pkg.sub.deep"] == {"pkg.b"}
    assert circles(graph) == []


def test_import_circles_are_found_with_every_member(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg.b import x\n",
        "pkg/b.py": "import pkg.c\nx = 1\n",
        "pkg/c.py": "from pkg import a\n",
        "pkg/d.py": "from pkg import a\n",                 # into the circle, not part of it
        "pkg/e.py": "def f():\n    from pkg import d\n",
        "pkg/lazy.py": "from pkg import e\n",
        "pkg/typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                        "    from pkg import lazy\n",
    })
    assert circles(import_graph(root)) == [(["pkg.a", "pkg.b", "pkg.c"],
                                            ["pkg.a", "pkg.b", "pkg.c", "pkg.a"])]


def test_include_graph_and_its_circles(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "csrc/a.h": '#pragma once\n#include "b.h"\n#include <vector>\n',
        "csrc/b.h": '#pragma once\n  #  include "runtime/c.h"\n',
        "csrc/runtime/c.h": '#include "a.h"\n',            # found one folder up
        "csrc/kernel.cpp": '#include "a.h"\n#include "missing.h"\n',
        "csrc/self.h": '#include "self.h"\n',
        "csrc/fine.cu": '#include "runtime/c.h"\n',
    })
    graph = include_graph(root)
    assert graph["csrc/kernel.cpp"] == {"csrc/a.h"}
    assert graph["csrc/runtime/c.h"] == {"csrc/a.h"}
    assert circles(graph) == [
        (["csrc/a.h", "csrc/b.h", "csrc/runtime/c.h"],
         ["csrc/a.h", "csrc/b.h", "csrc/runtime/c.h", "csrc/a.h"]),
        (["csrc/self.h"], ["csrc/self.h", "csrc/self.h"]),
    ]
    (root / "csrc/runtime/c.h").write_text("int c;\n", encoding="utf-8")
    assert circles(include_graph(root)) == [(["csrc/self.h"], ["csrc/self.h", "csrc/self.h"])]
