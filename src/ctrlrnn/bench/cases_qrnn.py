"""Benchmark rows of the QRNN (f-, fo- and ifo-pooling) against ``torch.nn.LSTM``, and the
training-memory rows (the fo-pooling QRNN and ``torch.nn.LSTM`` over lengths up to 16,384)."""

from __future__ import annotations

import torch

from ctrlrnn.bench.case_registry import Point, Workload, case
from ctrlrnn.bench.cases_torch import lstm
from ctrlrnn.bench.costs import QRNN_GATES, per_unit_bytes, qrnn_flops, qrnn_unit_values
from ctrlrnn.bench.grids import LAYER_FULL, LAYER_QUICK, MEMORY_FULL, MEMORY_QUICK
from ctrlrnn.bench.workloads import family_backend, make_input, module_workload, require

QRNN_WINDOW = 2


def _qrnn(p: Point, dtype: torch.dtype, pooling: str) -> Workload:
    qrnn_cls = require("QRNN")
    m = qrnn_cls(p.width, p.width, batch_first=True, window=QRNN_WINDOW, pooling=pooling).to(dtype)
    fwd, bwd = qrnn_unit_values(pooling)
    return module_workload(
        m,
        make_input(p, dtype),
        qrnn_flops(p, p.width, p.width, QRNN_WINDOW, QRNN_GATES[pooling]),
        per_unit_bytes(p, p.width, dtype, fwd=fwd, bwd=bwd),
        backend=family_backend("scan"),
    )


def _register_qrnn(pooling: str) -> None:
    def build(p: Point, dtype: torch.dtype) -> Workload:
        return _qrnn(p, dtype, pooling)

    build.__name__ = build.__qualname__ = f"qrnn_{pooling}"
    build.__doc__ = f"``ctrlrnn.QRNN(width, width, window=2, pooling={pooling!r})``."
    case(
        f"qrnn_{pooling}",
        group="layer",
        quick=LAYER_QUICK,
        full=LAYER_FULL,
        description=(
            f"ctrlrnn.QRNN, window {QRNN_WINDOW}, {pooling}-pooling, input = hidden = width"
        ),
    )(build)


for _pooling in ("f", "fo", "ifo"):
    _register_qrnn(_pooling)


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
    """The fo-pooling QRNN, measured for memory rather than time."""
    return _qrnn(p, dtype, "fo")


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
