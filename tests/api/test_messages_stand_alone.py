"""Error messages and warnings stand alone: none sends the reader to a file of the repository
(``docs/...``, a ``.md`` page, ``README``), which a user who installed the wheel does not have.
A page of the documentation is named by its title instead, after a short explanation."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "ctrlrnn"
REPO_PATH = re.compile(
    r"(?<![\w.])(?:docs|tests|scripts|benchmarks)/|\b[\w-]+\.md\b|\bREADME\b"
)


def message_strings(path: Path) -> list[tuple[int, str]]:
    """The string constants of every ``raise`` and every ``warn(...)`` call in ``path``, with
    module-level constants they name (e.g. a message kept in a constant) followed."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    constants = {
        node.targets[0].id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
    }

    def strings(node: ast.AST, seen: frozenset[str] = frozenset()) -> list[str]:
        found = []
        for n in ast.walk(node):
            if isinstance(n, ast.Constant) and isinstance(n.value, str):
                found.append(n.value)
            elif isinstance(n, ast.Name) and n.id in constants and n.id not in seen:
                found += strings(constants[n.id], seen | {n.id})
        return found

    out = []
    for node in ast.walk(tree):
        target: ast.AST | None = None
        if isinstance(node, ast.Raise):
            target = node.exc
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name == "warn":
                target = node
        if target is not None:
            out += [(node.lineno, s) for s in strings(target)]
    return out


def test_the_scan_sees_messages():
    lines = [s for p in SRC.rglob("*.py") for _, s in message_strings(p)]
    assert len(lines) > 200
    assert any("the TorchScript ONNX exporter" in s for s in lines)  # a message in a constant


def test_no_message_names_a_repository_file():
    offenders = [
        f"{path.relative_to(SRC)}:{line}: {text!r}"
        for path in sorted(SRC.rglob("*.py"))
        for line, text in message_strings(path)
        if REPO_PATH.search(text)
    ]
    assert offenders == []
