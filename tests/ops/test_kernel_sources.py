"""The C++ sources under ops/ keep their shape: no header includes itself through others, no file
is over 600 lines and no function over 80 (the limits of issue 72, which slipped once before)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ctrlrnn.ops import registry

OPS_DIR = registry.OPS_DIR
CSRC = OPS_DIR / "csrc"
SOURCES = sorted(p for p in OPS_DIR.rglob("*") if p.suffix in {".cpp", ".h"})
MAX_LINES = 600
MAX_FUNCTION_LINES = 80


def includes(path: Path) -> list[Path]:
    """The ctrlrnn headers ``path`` includes (quoted includes, found beside it or in csrc/)."""
    found = []
    for name in re.findall(r'^#include "([^"]+)"', path.read_text(encoding="utf-8"), re.M):
        for folder in (path.parent, CSRC):
            if (folder / name).is_file():
                found.append((folder / name).resolve())
                break
    return found


def test_no_include_circle() -> None:
    graph = {p.resolve(): includes(p) for p in SOURCES}
    state: dict[Path, int] = {}  # 1: on the current path, 2: done

    def visit(node: Path, path: list[Path]) -> None:
        state[node] = 1
        for nxt in graph.get(node, []):
            if state.get(nxt) == 1:
                cycle = [p.name for p in path[path.index(nxt):]] + [nxt.name]
                pytest.fail(f"include circle: {' -> '.join(cycle)}")
            if state.get(nxt) is None:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in graph:
        if node not in state:
            visit(node, [node])


def function_lengths(text: str) -> list[tuple[int, int]]:
    """``(first line, lines)`` of every function body opened at namespace or class level
    (comments and string literals set aside first)."""
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'"(\\.|[^"\\])*"', '""', text)
    stack: list[tuple[str, int]] = []
    found = []
    header = ""
    for number, line in enumerate(text.splitlines(), 1):
        for ch in line:
            if ch == "{":
                if re.search(r'\bnamespace\b|extern ""', header):
                    kind = "scope"
                elif re.search(r"\b(class|struct|union|enum)\b[^(]*$", header):
                    kind = "scope"
                elif all(k == "scope" for k, _ in stack) and "(" in header:
                    kind = "function"
                else:
                    kind = "block"
                stack.append((kind, number))
                header = ""
            elif ch == "}":
                kind, start = stack.pop()
                if kind == "function":
                    found.append((start, number - start + 1))
                header = ""
            elif ch == ";":
                header = ""
            else:
                header += ch
        header += " "
    return found


def test_the_function_reader_finds_functions() -> None:
    text = "namespace a {\nstruct S {\n  int f() {\n    return 1;\n  }\n};\nint g(int x) {\n" \
           "  if (x) {\n    return 2;\n  }\n  return 3;\n}\n}  // namespace a\n"
    assert function_lengths(text) == [(3, 3), (7, 6)]


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.relative_to(OPS_DIR).as_posix())
def test_no_file_or_function_over_the_limits(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_LINES
    long = [(line, n) for line, n in function_lengths(text) if n > MAX_FUNCTION_LINES]
    assert long == [], f"functions over {MAX_FUNCTION_LINES} lines at (line, lines): {long}"
