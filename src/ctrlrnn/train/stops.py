"""How a training run stops early: a non-finite value (:class:`Diverged`) or a stop signal
(:class:`InterruptFlag` records it, :class:`TrainingInterrupted` reports it)."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

from ctrlrnn.interrupts import STOP_SIGNALS, StopSignal

__all__ = ["Diverged", "InterruptFlag", "TrainingInterrupted"]


class Diverged(Exception):
    """A non-finite training loss or parameter: the run stops (caught in
    :meth:`~ctrlrnn.train.trainer.Trainer.fit`)."""

    def __init__(self, step: int, what: str) -> None:
        super().__init__(what)
        self.step = step
        self.what = what


class TrainingInterrupted(KeyboardInterrupt):
    """A stop signal (Ctrl-C, SIGTERM, SIGHUP) stopped training at a step boundary, after the
    checkpoint was written; ``signum`` is the signal.

    A ``KeyboardInterrupt``, so that ``except Exception`` (one failed run among several)
    never swallows it."""

    def __init__(self, step: int, checkpoint: Path, signum: int = signal.SIGINT) -> None:
        super().__init__(f"interrupted at step {step}")
        self.step = step
        self.checkpoint = checkpoint
        self.signum = int(signum)


class InterruptFlag:
    """A stop signal (:data:`~ctrlrnn.interrupts.STOP_SIGNALS`) records itself in a flag the
    loop reads at step boundaries (main thread only; elsewhere the signals keep their
    handlers). A second stop signal raises :class:`~ctrlrnn.interrupts.StopSignal` at once."""

    def __init__(self) -> None:
        #: the first stop signal received (0: none)
        self.signum = 0
        self._previous: dict[int, Any] = {}

    @property
    def raised(self) -> bool:
        return self.signum != 0

    def _handler(self, signum: int, frame: Any) -> None:
        if self.raised:
            raise StopSignal(self.signum)
        self.signum = int(signum)

    def __enter__(self) -> InterruptFlag:
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}
