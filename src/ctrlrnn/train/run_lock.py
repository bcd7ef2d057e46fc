"""One writer per run directory: an exclusive lock held for the whole run.

``RunLock(out)`` takes an exclusive ``flock`` on ``out/.lock`` (released by the kernel when
the process ends, however it ends, so a killed run never leaves a lock behind) and writes the
holder's PID, host and start time into it. A second run into the same directory stops at
once with one line naming the holder; a lock file left by a process that is gone is taken
over, and the new holder says so. Where ``fcntl`` is missing (Windows), the lock is the
exclusive creation of the file, and a file whose PID is no longer running on this host is
taken over.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

from ctrlrnn import files, interrupts
from ctrlrnn.processes import pid_alive

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = ".lock"


class RunLocked(RuntimeError):
    """Another process holds the run directory."""


def _holder_text(info: dict[str, Any]) -> str:
    pid, host, since = info.get("pid", "?"), info.get("host", "?"), info.get("started", "?")
    return f"PID {pid} on {host}, since {since}"


def _alive_here(info: dict[str, Any]) -> tuple[bool, bool]:
    """Whether a lock file's holder ``info`` is of this host, and whether its PID runs here
    (the rule where ``fcntl`` is missing)."""
    here = info.get("host") == socket.gethostname()
    return here, here and pid_alive(int(info.get("pid", 0) or 0))


def _read_info(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, json.JSONDecodeError):
        return {}


class RunLock:
    """The exclusive lock of a run directory (a context manager)."""

    def __init__(self, directory: str | Path, *, quiet: bool = False) -> None:
        self.dir = Path(directory)
        self.path = self.dir / LOCK_NAME
        self.quiet = quiet
        self._fd: int | None = None

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _info(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "host": socket.gethostname(),
                "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds")}

    def _busy(self, info: dict[str, Any]) -> RunLocked:
        return RunLocked(f"out: {self.dir} is in use by another run ({_holder_text(info)}); "
                         "wait for it to end or choose another --out")

    def _took_over(self, previous: dict[str, Any]) -> None:
        pid = previous.get("pid")
        if pid and pid != os.getpid() and not self.quiet:
            print(f"lock: {self.path} was left by {_holder_text(previous)}, which is no longer "
                  "running; taken over", file=sys.stderr)

    def acquire(self) -> None:
        """Take the lock or raise :class:`RunLocked` naming its holder (``OSError`` when the
        directory cannot be written)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        if fcntl is None:  # Windows
            self._acquire_by_creation()
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise self._busy(_read_info(self.path)) from None
        except BaseException:
            os.close(fd)
            raise
        previous = _read_info(self.path)
        os.ftruncate(fd, 0)
        os.write(fd, files.dumps(self._info()).encode())
        os.fsync(fd)
        self._fd = fd
        interrupts.at_stop(self.release)
        self._took_over(previous)

    def _acquire_by_creation(self) -> None:  # Windows
        for _attempt in range(2):
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                info = _read_info(self.path)
                here, alive = _alive_here(info)
                if here and not alive:
                    self.path.unlink(missing_ok=True)
                    self._took_over(info)
                    continue
                raise self._busy(info) from None
            os.write(fd, files.dumps(self._info()).encode())
            self._fd = fd
            interrupts.at_stop(self.release)
            return
        raise self._busy(_read_info(self.path))

    def release(self) -> None:
        """Give the lock up, its file emptied (nothing when it is not held)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        interrupts.forget(self.release)
        if fcntl is None:  # Windows
            os.close(fd)
            self.path.unlink(missing_ok=True)
            return
        # the file stays (deleting a lock file races with a process about to lock it), emptied:
        # a holder's name left in it means that holder was killed
        os.ftruncate(fd, 0)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def is_held(directory: str | Path) -> bool:
    """Whether a live process holds the lock of the run directory ``directory`` (nothing is
    taken: the probe's shared lock is given back at once). Where ``fcntl`` is missing, a lock
    file whose PID is running on this host counts as held."""
    path = Path(directory) / LOCK_NAME
    if fcntl is None:  # Windows (a missing file reads as no holder)
        return _alive_here(_read_info(path))[1]
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)
