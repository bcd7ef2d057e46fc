"""One optimizer step (:func:`training_step`) and the clock that times a run's steps."""

from __future__ import annotations

import os
import time
from typing import Any

import torch
from torch import nn

from ctrlrnn.tasks.base import Task
from ctrlrnn.train.distributed import DistContext, average_gradients
from ctrlrnn.train.precision import FLOAT32, MixedPrecision

__all__ = ["StepClock", "training_step"]


def training_step(
    task: Task,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    params: list[nn.Parameter],
    batch: Any,
    clip_norm: float,
    ctx: DistContext | None = None,
    precision: MixedPrecision | None = None,
) -> torch.Tensor:
    """One optimizer step on ``batch``: loss (under ``precision``'s autocast; float32 when
    None), backward, gradient averaging over processes, clipping to ``clip_norm`` (0: none)
    and the update; returns the (attached) loss.

    The trainer's loop and the epoch-time measurement of ``ctrlrnn reproduce`` both use it,
    so the timed step is the trained one."""
    precision = precision or FLOAT32
    with precision.autocast():
        loss = task.loss(model, batch)
    optimizer.zero_grad(set_to_none=True)

    def between() -> None:
        if ctx is not None:
            average_gradients(params, ctx)
        if clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(params, clip_norm)

    precision.backward_and_step(loss, optimizer, between)
    return loss


class StepClock:
    """The wall-clock and CPU seconds of a run's training, continued from those a resumed
    run's progress holds; it also keeps the busiest load average a start saw."""

    def __init__(self, progress: dict[str, Any]) -> None:
        self._wall_start = time.perf_counter()
        self._cpu_start = time.process_time()
        self._cpu_before = float(progress.get("cpu_seconds") or 0.0)
        load = load_average()
        if load is not None:  # the busiest start of the run (a resume may start on a busier one)
            progress["load_start"] = max(load, progress.get("load_start") or 0.0)
        self._wall_before = float(progress["train_seconds"])

    def record(self, progress: dict[str, Any]) -> float:
        """Store the seconds trained so far in ``progress`` and return the wall-clock ones."""
        elapsed = self._wall_before + time.perf_counter() - self._wall_start
        progress["train_seconds"] = elapsed
        progress["cpu_seconds"] = self._cpu_before + time.process_time() - self._cpu_start
        return elapsed


def load_average() -> float | None:
    """The 1-minute load average, or None where the system has none."""
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):  # pragma: no cover - Windows
        return None
