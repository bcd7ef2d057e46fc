"""Whether a process is still running: the one check behind every "left by a process that is
gone" decision (run-directory locks, checkpoint temporaries, data-preparation folders)."""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """Whether a process with this PID exists on this machine (``os.kill(pid, 0)``)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except PermissionError:  # exists, owned by someone else
        return True
    except (OSError, OverflowError):  # ProcessLookupError: gone; others: not a usable PID
        return False
    return True
