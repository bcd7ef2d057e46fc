"""How a stop request ends a command: Ctrl-C (SIGINT), SIGTERM and SIGHUP alike.

Container runtimes, Slurm preemption, systemd and ``timeout`` send SIGTERM; a closed terminal
sends SIGHUP; each is handled as Ctrl-C is. Outside a training loop the ``ctrlrnn`` command's
handler runs the cleanups registered with :func:`at_stop` (a run directory's lock is
released), prints :func:`interrupt_line` and exits with :func:`exit_status` at once.
``ctrlrnn train`` sets a line naming its checkpoint and the command that resumes it
(:func:`set_interrupt_line`); its training loop installs its own handler, which stops at a
step boundary after writing the checkpoint.

**Exit status** of a command stopped by a signal: ``128 + signal number`` (130 for SIGINT,
143 for SIGTERM, 129 for SIGHUP), the status a shell reports for a process that the signal
ended, so scripts and schedulers that test for a stop by signal keep working, while the
command still ends on its own terms (checkpoint written, lock released, one line printed).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

#: the signals that stop a command as Ctrl-C does (SIGHUP where the platform has it)
STOP_SIGNALS: tuple[int, ...] = tuple(
    int(s) for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None))
    if s is not None
)

#: what a stop outside a training loop prints: a command may set a better line (``train``
#: names its checkpoint and the command that resumes it)
_interrupt_line: list[Callable[[], str]] = []

#: what a stop outside a training loop runs before the process exits, oldest first
_cleanups: list[Callable[[], None]] = []

#: whether the command has printed the line of its stop (:func:`say_stop`)
_said: list[bool] = [False]


class StopSignal(KeyboardInterrupt):
    """A stop signal that must end the command at once (a second one while the first is
    being honoured). A ``KeyboardInterrupt``, so ``except Exception`` never swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal_name(signum))
        self.signum = signum


def signal_name(signum: int) -> str:
    """``SIGTERM`` for ``signal.SIGTERM``; ``signal 42`` for a number without a name."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def exit_status(signum: int | None) -> int:
    """The exit status of a command stopped by ``signum``: ``128 + signum`` (130 when the
    signal is unknown: a ``KeyboardInterrupt`` raised by Python code)."""
    return 128 + int(signum if signum else signal.SIGINT)


def stopped_by(exc: BaseException) -> int:
    """The signal that ``exc`` (a ``KeyboardInterrupt``) stands for: its ``signum`` when it
    carries one, else SIGINT."""
    return int(getattr(exc, "signum", None) or signal.SIGINT)


def interrupted_words(signum: int) -> str:
    """``interrupted`` for Ctrl-C, ``interrupted by SIGTERM`` for another signal."""
    return "interrupted" if signum == signal.SIGINT else f"interrupted by {signal_name(signum)}"


def set_interrupt_line(line: Callable[[int], str]) -> None:
    """Make a stop outside a training loop (which stops at a step boundary on its own) print
    ``line(signum)`` instead of ``ctrlrnn COMMAND: interrupted``."""
    _interrupt_line[:] = [line]


def interrupt_line(command: str, signum: int = signal.SIGINT) -> str:
    """The line a stop by ``signum`` prints for ``ctrlrnn COMMAND``: the one a command set
    (empty: nothing to print), else ``ctrlrnn COMMAND: interrupted`` (also when the set line
    fails)."""
    plain = f"ctrlrnn {command}: {interrupted_words(signum)}"
    try:
        return _interrupt_line[0](signum) if _interrupt_line else plain
    except Exception:  # noqa: BLE001 - the line is best effort; the exit is not
        return plain


def say_stop(line: str) -> None:
    """Print the line of the stop the command is ending with; a stop signal that arrives
    afterwards (``torchrun`` stopping the processes left) ends the process without a second
    line."""
    _said[0] = True
    if line:
        try:
            print(line, file=sys.stderr, flush=True)
        except OSError:  # a terminal that hung up (SIGHUP): the exit status still tells
            pass


def stop_said() -> bool:
    """Whether :func:`say_stop` has printed the line of the command's stop."""
    return _said[0]


def reset_stop() -> None:
    """Forget a stop said before (a new command starts in this process)."""
    _said[0] = False


def at_stop(cleanup: Callable[[], None]) -> None:
    """Run ``cleanup`` when a stop signal ends the process outside a training loop (until
    :func:`forget` removes it)."""
    _cleanups.append(cleanup)


def forget(cleanup: Callable[[], None]) -> None:
    """Remove a cleanup registered with :func:`at_stop` (nothing when it is not there)."""
    for i, registered in enumerate(_cleanups):
        if registered == cleanup:
            del _cleanups[i]
            return


def stop_with_parent() -> None:
    """Have this process get SIGTERM when its parent ends (Linux's ``PR_SET_PDEATHSIG``), as a
    stop signal sent to the parent would be passed on: a worker whose parent was killed, even
    by SIGKILL, stops at a step boundary instead of training on alone. Elsewhere nothing."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGTERM))  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent ended before the call: no signal would come
        os.kill(os.getpid(), signal.SIGTERM)


def run_cleanups() -> None:
    """Run the registered cleanups, newest first; a failing one does not stop the others."""
    while _cleanups:
        cleanup = _cleanups.pop()
        try:
            cleanup()
        except Exception as exc:  # noqa: BLE001 - the process is ending; say it and go on
            print(f"ctrlrnn: cleanup at stop failed: {exc}", file=sys.stderr)
