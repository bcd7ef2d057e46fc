"""What Ctrl-C prints when it ends a command: one line, which a command may set.

The ``ctrlrnn`` command's handler prints :func:`interrupt_line`; ``ctrlrnn train`` sets a line
naming its checkpoint and the command that resumes it (:func:`set_interrupt_line`).
"""

from __future__ import annotations

from collections.abc import Callable

#: what Ctrl-C outside a training loop prints: a command may set a better line (``train``
#: names its checkpoint and the command that resumes it)
_interrupt_line: list[Callable[[], str]] = []


def set_interrupt_line(line: Callable[[], str]) -> None:
    """Make Ctrl-C (outside a training loop, which stops at a step boundary on its own)
    print ``line()`` instead of ``ctrlrnn COMMAND: interrupted``."""
    _interrupt_line[:] = [line]


def interrupt_line(command: str) -> str:
    """The line Ctrl-C prints for ``ctrlrnn COMMAND``: the one a command set, else
    ``ctrlrnn COMMAND: interrupted`` (also when the set line fails)."""
    try:
        return _interrupt_line[0]() if _interrupt_line else f"ctrlrnn {command}: interrupted"
    except Exception:  # noqa: BLE001 - the line is best effort; the exit is not
        return f"ctrlrnn {command}: interrupted"
