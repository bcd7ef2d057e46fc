"""Benchmark rows of the torch baselines every layer is compared with: ``torch.nn.LSTM`` and
``torch.nn.GRU``, one layer, input = hidden = width."""

from __future__ import annotations

import torch
from torch import nn

from ctrlrnn.bench.case_registry import Point, Workload, case
from ctrlrnn.bench.costs import GRU_UNIT_VALUES, LSTM_UNIT_VALUES, gated_rnn_flops, per_unit_bytes
from ctrlrnn.bench.grids import LAYER_FULL, LAYER_QUICK
from ctrlrnn.bench.workloads import make_input, module_workload


@case(
    "lstm",
    group="layer",
    quick=LAYER_QUICK,
    full=LAYER_FULL,
    description="torch.nn.LSTM, 1 layer, input = hidden = width",
)
def lstm(p: Point, dtype: torch.dtype) -> Workload:
    """``torch.nn.LSTM(width, width)``, batch first."""
    m = nn.LSTM(p.width, p.width, batch_first=True).to(dtype)
    return module_workload(
        m,
        make_input(p, dtype),
        gated_rnn_flops(p, p.width, p.width, gates=4),
        per_unit_bytes(p, p.width, dtype, fwd=LSTM_UNIT_VALUES[0], bwd=LSTM_UNIT_VALUES[1]),
    )


@case(
    "gru",
    group="layer",
    quick=LAYER_QUICK,
    full=LAYER_FULL,
    description="torch.nn.GRU, 1 layer, input = hidden = width",
)
def gru(p: Point, dtype: torch.dtype) -> Workload:
    """``torch.nn.GRU(width, width)``, batch first."""
    m = nn.GRU(p.width, p.width, batch_first=True).to(dtype)
    return module_workload(
        m,
        make_input(p, dtype),
        gated_rnn_flops(p, p.width, p.width, gates=3),
        per_unit_bytes(p, p.width, dtype, fwd=GRU_UNIT_VALUES[0], bwd=GRU_UNIT_VALUES[1]),
    )
