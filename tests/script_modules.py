"""The repository's ``scripts/*.py`` and ``benchmarks/*.py`` loaded as modules, for tests that
call their functions or their ``main`` with a patched ``sys.argv``."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@contextmanager
def script_module(name: str, folder: Path = SCRIPTS) -> Iterator[ModuleType]:
    """``scripts/NAME.py`` (or ``NAME.py`` in ``folder``) as module ``NAME``, registered in
    ``sys.modules`` while in use (dataclasses and pickling look a module up there) and removed
    after."""
    spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"name: no script {folder / f'{name}.py'}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)
