"""Which tests touch a compiled kernel, so the plain-runtime run (``scripts/test``) repeats
exactly those.

``--record-kernel-tests DIR`` (the main run) wraps every op a kernel library hands out
(:meth:`ctrlrnn.ops.kernel_library.KernelLibrary.op`, the one way Python reaches a compiled op)
and every child process started, and writes to ``DIR/<worker>.json`` the tests and the fixtures
whose run called one. A child process counts as a call: its kernels are out of sight here.
``--only-kernel-tests DIR`` (the plain run) then deselects every test that neither called one
itself nor uses a fixture that did. A test marked ``not_plain`` (its reason given: it tests
the tuned runtime itself, or settings read in child processes) or using the ``tuned_runtime``
fixture is left out under ``--runtime plain`` in any case.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

#: whether a kernel was called (or a child started) since the flag was last cleared
_CALLED = [False]
_TESTS: set[str] = set()
_FIXTURES: set[str] = set()


def add_options(parser: pytest.Parser) -> None:
    parser.addoption("--record-kernel-tests", metavar="DIR", default=None,
                     help="write the tests and fixtures that call a compiled kernel to DIR")
    parser.addoption("--only-kernel-tests", metavar="DIR", default=None,
                     help="run only the tests that DIR records as calling a compiled kernel")


def _instrument() -> None:
    from ctrlrnn.ops.kernel_library import KernelLibrary

    resolve = KernelLibrary.op

    def op(self: KernelLibrary, name: str):
        fn = resolve(self, name)

        def called(*args, **kwargs):
            _CALLED[0] = True
            return fn(*args, **kwargs)

        return called

    start = subprocess.Popen.__init__

    def popen(self, *args, **kwargs):
        _CALLED[0] = True
        start(self, *args, **kwargs)

    KernelLibrary.op = op
    subprocess.Popen.__init__ = popen


def _key(baseid: str, name: str) -> str:
    return f"{baseid}::{name}"


class Recorder:
    """The main run's side: notes who calls a kernel, writes it at the end."""

    def __init__(self, folder: str) -> None:
        self.folder = Path(folder)
        _instrument()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef, request):
        before, _CALLED[0] = _CALLED[0], False
        yield
        if _CALLED[0]:
            _FIXTURES.add(_key(fixturedef.baseid, fixturedef.argname))
        _CALLED[0] = _CALLED[0] or before

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        _CALLED[0] = False
        yield
        if _CALLED[0]:
            _TESTS.add(item.nodeid)

    def pytest_sessionfinish(self, session):
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        self.folder.mkdir(parents=True, exist_ok=True)
        record = {"tests": sorted(_TESTS), "fixtures": sorted(_FIXTURES)}
        (self.folder / f"{worker}.json").write_text(json.dumps(record), encoding="utf-8")


def _recorded(folder: str) -> tuple[set[str], set[str]]:
    files = sorted(Path(folder).glob("*.json"))
    if not files:
        raise pytest.UsageError(f"--only-kernel-tests: {folder} holds no record of a main run")
    tests: set[str] = set()
    fixtures: set[str] = set()
    for f in files:
        doc = json.loads(f.read_text(encoding="utf-8"))
        tests.update(doc["tests"])
        fixtures.update(doc["fixtures"])
    return tests, fixtures


def _uses_recorded_fixture(item: pytest.Item, fixtures: set[str]) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs if info is not None else {}
    return any(_key(d.baseid, name) in fixtures for name, ds in defs.items() for d in ds)


def select(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect, under ``--runtime plain``, the tests of the tuned runtime itself and, with
    ``--only-kernel-tests``, those that call no compiled kernel."""
    plain = config.getoption("--runtime") == "plain"
    folder = config.getoption("--only-kernel-tests")
    tests, fixtures = _recorded(folder) if folder else (set(), set())
    keep, drop = [], []
    for item in items:
        tuned = item.get_closest_marker("not_plain") or "tuned_runtime" in item.fixturenames
        idle = folder and item.nodeid not in tests and not _uses_recorded_fixture(item, fixtures)
        (drop if plain and (tuned or idle) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
