"""The run lock where ``fcntl`` is missing (Windows): the lock is the exclusive creation of the
lock file, and a file whose PID no longer runs on this host is taken over. The rule is run
here by hiding ``fcntl`` from the module, so it is tested on every platform."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ctrlrnn.train import run_lock
from ctrlrnn.train.run_lock import LOCK_NAME, RunLock, RunLocked, is_held


@pytest.fixture(autouse=True)
def _without_fcntl(monkeypatch):
    monkeypatch.setattr(run_lock, "fcntl", None)


def _gone_pid() -> int:
    """The PID of a process that has ended (reaped, so no process holds it now)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _leave_lock_file(run: Path, *, pid: int, host: str) -> None:
    run.mkdir(parents=True, exist_ok=True)
    (run / LOCK_NAME).write_text(json.dumps({"pid": pid, "host": host, "started": "then"}))


def test_holder_is_named_and_the_file_goes_with_the_lock(tmp_path):
    run = tmp_path / "run"
    assert not is_held(run)
    with RunLock(run):
        info = json.loads((run / LOCK_NAME).read_text())
        assert info["pid"] == os.getpid() and info["host"] == socket.gethostname()
        assert is_held(run)
        with pytest.raises(RunLocked, match=rf"in use by another run \(PID {os.getpid()} on "):
            RunLock(run).acquire()
    assert not (run / LOCK_NAME).exists()
    assert not is_held(run)
    with RunLock(run, quiet=True):  # free again
        assert is_held(run)


def test_file_of_a_gone_process_on_this_host_is_taken_over(tmp_path, capsys):
    run = tmp_path / "run"
    pid = _gone_pid()
    _leave_lock_file(run, pid=pid, host=socket.gethostname())
    assert not is_held(run)
    with RunLock(run):
        assert json.loads((run / LOCK_NAME).read_text())["pid"] == os.getpid()
    err = capsys.readouterr().err
    assert f"was left by PID {pid} on {socket.gethostname()}" in err and "taken over" in err


def test_file_of_another_host_is_never_taken_over(tmp_path):
    """A PID of another machine (a shared disk) cannot be probed from here: the file is left
    alone and the run refused, naming that host."""
    run = tmp_path / "run"
    _leave_lock_file(run, pid=_gone_pid(), host="another-host")
    assert not is_held(run)  # no live process of this host holds it
    with pytest.raises(RunLocked, match=r"on another-host, since then"):
        RunLock(run).acquire()
    assert json.loads((run / LOCK_NAME).read_text())["host"] == "another-host"


def test_file_of_a_live_process_is_held(tmp_path):
    run = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        _leave_lock_file(run, pid=holder.pid, host=socket.gethostname())
        assert is_held(run)
        with pytest.raises(RunLocked, match=rf"PID {holder.pid} "):
            RunLock(run).acquire()
    finally:
        holder.kill()
        holder.wait()
    assert not is_held(run)
    with RunLock(run, quiet=True):
        pass
