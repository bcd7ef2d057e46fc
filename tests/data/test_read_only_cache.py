"""A data cache that cannot be written (issue 69): a source prepared there is read without the
preparation lock; one that is not (or ``--force``) is one line naming the directory and the
setting that moves the cache, exit 2.

The cache is made read-only as a deployment makes it: a read-only bind mount when the tests
run as root (root writes through permissions), else the permissions.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HERE = Path(__file__).parent

#: ``python -c CHILD ARGS...``: ``ctrlrnn ARGS`` with the ``fake`` source of
#: test_prepare_faults.py in the catalog
CHILD = textwrap.dedent(f"""
    import sys
    sys.path.insert(0, {str(HERE)!r})
    from test_prepare_faults import FakeSource
    from ctrlrnn.data import cli as data_cli
    from ctrlrnn.cli import main

    real = data_cli.get_entry
    data_cli.get_entry = lambda name: FakeSource() if name == "fake" else real(name)
    if sys.argv[1] == "ready_dir":  # what a task's set-up calls
        try:
            print(FakeSource().ready_dir(sys.argv[2]))
        except Exception as exc:
            print(f"{{type(exc).__name__}}: {{exc}}", file=sys.stderr)
            sys.exit(1)
        sys.exit(0)
    sys.exit(main(sys.argv[1:]))
""")


def _read_only_prefix(directory: Path) -> list[str]:
    """A command prefix under which ``directory`` cannot be written (root: a read-only bind
    mount in a mount namespace of its own); empty where the permissions do it."""
    if os.geteuid() != 0:
        return []
    unshare = shutil.which("unshare")
    probe = ["sh", "-c", 'mount --bind -o ro "$0" "$0" && ! touch "$0/.probe" 2>/dev/null',
             str(directory)]
    if unshare is None or subprocess.run([unshare, "-m", *probe], capture_output=True
                                         ).returncode != 0:
        pytest.skip("root, and no mount namespace to make a read-only directory in")
    return [unshare, "-m", "sh", "-c", 'mount --bind -o ro "$0" "$0" && exec "$@"',
            str(directory)]


@pytest.fixture
def read_only(tmp_path: Path) -> tuple[Path, list[str]]:
    """``(directory, prefix)``: once :func:`_freeze` has run, commands run under ``prefix``
    cannot write ``directory``."""
    directory = tmp_path / "ro"
    directory.mkdir()
    return directory, _read_only_prefix(directory)


def _freeze(directory: Path, prefix: list[str]) -> None:
    """Without a mount prefix: take the write permissions away (``chmod -R a-w``)."""
    if prefix:
        return
    for path in [directory, *directory.rglob("*")]:
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def _thaw(directory: Path) -> None:
    for path in [directory, *directory.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)


def _ctrlrnn(prefix: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([*prefix, sys.executable, "-c", CHILD, *args], env=env,
                          capture_output=True, text=True, timeout=300)


def _prepare_fake(cache: Path) -> None:
    sys.path.insert(0, str(HERE))
    try:
        from test_prepare_faults import FakeSource
    finally:
        sys.path.remove(str(HERE))
    FakeSource().prepare(cache)


@pytest.mark.parametrize("lock_file", [True, False])
def test_a_prepared_source_in_a_read_only_cache_is_used_without_the_lock(read_only, lock_file):
    directory, prefix = read_only
    cache = directory / "cache"
    _prepare_fake(cache)
    if not lock_file:  # a cache copied without its lock files
        (cache / ".fake.lock").unlink()
    _freeze(directory, prefix)
    try:
        run = _ctrlrnn(prefix, "data", "prepare", "fake", "--cache-dir", str(cache))
        loaded = _ctrlrnn(prefix, "ready_dir", str(cache))
    finally:
        _thaw(directory)
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr and "fake" in run.stdout
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == str(cache / "fake")
    assert (cache / ".fake.lock").exists() == lock_file


@pytest.mark.parametrize("force", [False, True])
def test_preparing_into_a_read_only_cache_is_one_line(read_only, force):
    """Not prepared there (or ``--force``): one line naming the directory and what to set,
    exit 2; the prepared folder is as it was."""
    directory, prefix = read_only
    cache = directory / "cache"
    if force:
        _prepare_fake(cache)
    else:
        cache.mkdir()
    before = sorted(p.name for p in cache.iterdir())
    _freeze(directory, prefix)
    try:
        run = _ctrlrnn(prefix, "data", "prepare", "fake", "--cache-dir", str(cache),
                       *(["--force"] if force else []))
    finally:
        _thaw(directory)
    assert run.returncode == 2, run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
    what = "fake cannot be rebuilt there (--force)" if force else "fake is not prepared there"
    assert lines[0].startswith(f"ctrlrnn data prepare: fake: {cache}: cannot be written (")
    assert lines[0].endswith(f"; {what}; set CTRLRNN_DATA (or --cache-dir) to a directory "
                             "that can be")
    assert sorted(p.name for p in cache.iterdir()) == before


def test_a_task_that_needs_an_unprepared_source_in_a_read_only_cache_names_it(read_only):
    """A task's set-up (``ready_dir``) on a read-only cache without the source: the data
    error names the directory, no ``OSError`` from the lock file."""
    directory, prefix = read_only
    cache = directory / "cache"
    cache.mkdir()
    _freeze(directory, prefix)
    try:
        run = _ctrlrnn(prefix, "ready_dir", str(cache))
    finally:
        _thaw(directory)
    assert run.returncode == 1
    line = run.stderr.strip()
    assert line.startswith(f"CacheNotWritable: {cache}: cannot be written ("), run.stderr
    assert line.endswith("; fake is not prepared there; set CTRLRNN_DATA (or --cache-dir) to "
                         "a directory that can be"), run.stderr
