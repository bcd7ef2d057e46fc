"""Cases that run in subprocesses, so that a crash fails a test instead of killing pytest.

A test module registers its cases on ``CASES = IsolatedCases(__file__)`` with
``@CASES.case(group, *variants)`` and defines one test that calls ``CASES.check(name)``,
parametrised over ``CASES.names()``. The cases of a group run in one subprocess (paying the
imports once), which reports each case's result on its own line as it goes. A case without a
result ended its subprocess: it fails naming the signal or exit status, and a new subprocess
runs the group's remaining cases (up to :data:`MAX_CRASHES` times).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

MARK = "CTRLRNN_CASE_RESULT "
MAX_CRASHES = 3  # per group: after a crash the group goes on after the case that crashed


class IsolatedCases:
    """The cases of the test module at ``path`` (which names this object ``CASES``)."""

    def __init__(self, path: str) -> None:
        self.path = str(Path(path).resolve())
        self.cases: dict[str, tuple[str, Callable[[], None]]] = {}  # name -> (group, case)
        self._results: dict[str, dict[str, dict[str, Any]]] = {}

    def case(
        self, group: str, *variants: Any
    ) -> Callable[[Callable[..., None]], Callable[..., None]]:
        """Register ``fn(variant)`` for each variant (or ``fn()``) as cases of ``group``."""

        def register(fn: Callable[..., None]) -> Callable[..., None]:
            if not variants:
                self.cases[fn.__name__.removeprefix("case_")] = (group, fn)
            for v in variants:
                name = f"{fn.__name__.removeprefix('case_')}[{v}]"
                self.cases[name] = (group, functools.partial(fn, v))
            return fn

        return register

    def names(self) -> list[str]:
        return list(self.cases)

    def run_group(self, group: str, skip: Sequence[str] = ()) -> None:
        """(In the subprocess.) Run the cases of ``group`` but ``skip``, printing one result
        line per case as it ends."""
        import torch

        torch.set_num_threads(2)  # several work items per thread: the kernels' block splitting
        for name, (grp, fn) in self.cases.items():
            if grp != group or name in skip:
                continue
            try:
                fn()
                result = {"case": name, "ok": True}
            except Exception:  # noqa: BLE001 - reported to the parent test
                result = {"case": name, "ok": False, "error": traceback.format_exc()[-3000:]}
            print(MARK + json.dumps(result), flush=True)

    def results(self, group: str) -> dict[str, dict[str, Any]]:
        """Each case's result; a case that ended its subprocess by a signal (or an exit) gets an
        error naming it, and the next subprocess goes on after it."""
        if group in self._results:
            return self._results[group]
        names = [n for n, (g, _) in self.cases.items() if g == group]
        env = {k: v for k, v in os.environ.items() if k != "CTRLRNN_BACKEND"}
        # the test module's own imports: its directory and this one (tests/)
        paths = [str(Path(self.path).parent), str(Path(__file__).resolve().parent)]
        results: dict[str, dict[str, Any]] = {}
        for _ in range(MAX_CRASHES + 1):
            code = (
                "import importlib.util, sys\n"
                f"sys.path[:0] = {paths!r}\n"
                f"spec = importlib.util.spec_from_file_location('isolated_cases_of_test', "
                f"{self.path!r})\n"
                "mod = importlib.util.module_from_spec(spec)\n"
                "sys.modules['isolated_cases_of_test'] = mod\n"
                "spec.loader.exec_module(mod)\n"
                f"mod.CASES.run_group({group!r}, {sorted(results)!r})\n"
            )
            proc = subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600
            )
            for line in proc.stdout.splitlines():
                if line.startswith(MARK):
                    r = json.loads(line[len(MARK) :])
                    results[r["case"]] = r
            pending = [n for n in names if n not in results]
            if proc.returncode == 0 or not pending:
                break
            how = f"signal {-proc.returncode}" if proc.returncode < 0 else (
                f"exit status {proc.returncode}")  # fmt: skip
            error = f"this case ended its subprocess ({how}); stderr:\n{proc.stderr[-3000:]}"
            results[pending[0]] = {"case": pending[0], "ok": False, "error": error}
        self._results[group] = results
        return results

    def check(self, name: str) -> None:
        """Fail unless case ``name`` ran in its group's subprocess and passed."""
        group = self.cases[name][0]
        results = self.results(group)
        if name not in results:
            pytest.fail(f"not run: the subprocesses of group {group!r} crashed "
                        f"{MAX_CRASHES + 1} times before this case")  # fmt: skip
        r = results[name]
        assert r["ok"], r.get("error")
