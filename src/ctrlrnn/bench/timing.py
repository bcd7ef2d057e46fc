"""The bench's timing: :mod:`ctrlrnn.timing` (also used by ``ctrlrnn reproduce``)."""

from __future__ import annotations

from ctrlrnn.timing import (
    Outputs,
    Timer,
    Timing,
    cuda_event_seconds,
    differentiable_outputs,
    forward_backward_timer,
    forward_timer,
    interleave,
    time_calls,
    time_forward,
    time_forward_backward,
)

__all__ = [
    "Outputs",
    "Timer",
    "Timing",
    "cuda_event_seconds",
    "differentiable_outputs",
    "forward_backward_timer",
    "forward_timer",
    "interleave",
    "time_calls",
    "time_forward",
    "time_forward_backward",
]
