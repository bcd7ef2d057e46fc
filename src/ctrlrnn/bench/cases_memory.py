"""Benchmark rows of training memory against sequence length, up to 16,384 steps: the
fo-pooling QRNN, and ``torch.nn.LSTM`` for comparison."""

from __future__ import annotations

import torch

from ctrlrnn.bench.case_registry import Point, Workload, case
from ctrlrnn.bench.cases_torch import lstm
from ctrlrnn.bench.cases_units import unit_row, unit_workload
from ctrlrnn.bench.grids import MEMORY_FULL, MEMORY_QUICK


@case(
    "qrnn_fo_memory",
    group="memory",
    kind="memory",
    quick=MEMORY_QUICK,
    full=MEMORY_FULL,
    compare_to=(),
    description="ctrlrnn.QRNN fo, window 2: training memory against sequence length",
)
def qrnn_fo_memory(p: Point, dtype: torch.dtype) -> Workload:
    """The fo-pooling QRNN (its ``qrnn_fo`` row), measured for memory rather than time."""
    return unit_workload(*unit_row("qrnn", "qrnn_fo"), p, dtype)


@case(
    "lstm_memory",
    group="memory",
    kind="memory",
    quick=(),
    full=MEMORY_FULL,
    compare_to=(),
    description="torch.nn.LSTM: training memory against sequence length (for comparison)",
)
def lstm_memory(p: Point, dtype: torch.dtype) -> Workload:
    """``torch.nn.LSTM``, measured for memory rather than time."""
    return lstm(p, dtype)
