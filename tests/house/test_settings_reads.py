"""No code in ``src/`` reads or writes the environment except :mod:`ctrlrnn.settings` (issue
72, item 3): the C++ kernels take their settings as arguments, and Python asks the settings
module (``value``, ``raw``, ``raw_int``, ``set_value``, ``child_environment``).

Python is read with :mod:`ast`, so a docstring or comment that names ``os.environ`` is not a
read: an offender is an attribute ``environ``, ``environb``, ``getenv``, ``getenvb``,
``putenv`` or ``unsetenv`` of the ``os`` module (under any alias), or one of those names
imported from ``os``. C++ is read with its comments removed: an offender is a call of
``getenv``/``secure_getenv`` or a use of ``environ``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
#: the one module allowed to touch the environment
SETTINGS_MODULE = SRC / "ctrlrnn" / "settings.py"

_OS_NAMES = frozenset({"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"})
_CPP_SUFFIXES = (".cpp", ".cc", ".cxx", ".cu", ".h", ".hpp", ".cuh")
_CPP_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_CPP_READ = re.compile(r"\b(?:secure_)?getenv\s*\(|\benviron\b")


def python_reads(path: Path) -> list[int]:
    """The lines of ``path`` where Python code touches the environment through ``os``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    aliases = {alias.asname or alias.name for node in ast.walk(tree)
               if isinstance(node, ast.Import) for alias in node.names if alias.name == "os"}
    lines = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr in _OS_NAMES
                and isinstance(node.value, ast.Name) and node.value.id in aliases):
            lines.add(node.lineno)
        elif (isinstance(node, ast.ImportFrom) and node.module == "os"
              and any(alias.name in _OS_NAMES for alias in node.names)):
            lines.add(node.lineno)
    return sorted(lines)


def cpp_reads(path: Path) -> list[int]:
    """The lines of the C++ file ``path`` that read the environment, comments left out."""
    text = path.read_text(encoding="utf-8", errors="replace")
    # blank the comments but keep their newlines, so line numbers stay right
    code = _CPP_COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text)
    return sorted({code.count("\n", 0, m.start()) + 1 for m in _CPP_READ.finditer(code)})


def environment_reads(root: Path, allowed: Path | None = None) -> list[str]:
    """``path:line: text`` of every environment access under ``root``, except in
    ``allowed``."""
    found = []
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path == allowed or "__pycache__" in path.parts:
            continue
        if path.suffix == ".py":
            lines = python_reads(path)
        elif path.suffix in _CPP_SUFFIXES:
            lines = cpp_reads(path)
        else:
            continue
        text = path.read_text(encoding="utf-8", errors="replace").splitlines()
        found += [f"{path.relative_to(root).as_posix()}:{n}: {text[n - 1].strip()}"
                  for n in lines]
    return found


def test_only_the_settings_module_touches_the_environment() -> None:
    assert SETTINGS_MODULE.is_file()
    assert python_reads(SETTINGS_MODULE), "the scan does not see the settings module's reads"
    found = environment_reads(SRC, allowed=SETTINGS_MODULE)
    assert not found, ("reads of the environment outside ctrlrnn/settings.py:\n"
                       + "\n".join(f"  {line}" for line in found))


def test_the_scan_on_a_fake_tree(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "reads.py").write_text(
        '"""Mentions os.environ in prose only."""\n'      # 1: a docstring, not a read
        "import os\n"
        "import os as _os\n"
        "a = os.environ.get('A')\n"                       # 4
        "b = _os.getenv('B')\n"                           # 5
        "from os import environ\n"                        # 6
        "c = self.environ\n"                              # 7: not the os module
        "os.putenv('C', '1')\n"                           # 8
        "# os.environ['D'] in a comment\n",
        encoding="utf-8")
    (tmp_path / "pkg" / "clean.py").write_text("import os\nos.path.join('a')\n", encoding="utf-8")
    (tmp_path / "pkg" / "allowed.py").write_text("import os\nos.environ\n", encoding="utf-8")
    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "k.h").write_text(
        "// std::getenv(\"X\") in a comment\n"
        "/* getenv(\n   spanning */ int a;\n"
        "const char* t = std::getenv(\"CTRLRNN_X\");\n"  # 4
        "extern char** environ;\n"                         # 5
        "int my_getenv_like = 0;\n",
        encoding="utf-8")
    found = environment_reads(tmp_path, allowed=tmp_path / "pkg" / "allowed.py")
    assert found == [
        'csrc/k.h:4: const char* t = std::getenv("CTRLRNN_X");',
        "csrc/k.h:5: extern char** environ;",
        "pkg/reads.py:4: a = os.environ.get('A')",
        "pkg/reads.py:5: b = _os.getenv('B')",
        "pkg/reads.py:6: from os import environ",
        "pkg/reads.py:8: os.putenv('C', '1')",
    ]
