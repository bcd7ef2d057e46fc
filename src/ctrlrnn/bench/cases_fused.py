"""Benchmark rows of the fused cells on their own: one layer of the fused LSTM and GRU cells
(``ctrlrnn.ops.fused_cells``) with their input GEMM, against ``nn.LSTM`` / ``nn.GRU``."""

from __future__ import annotations

import torch
from torch import nn

from ctrlrnn.bench.case_registry import Point, Workload, case
from ctrlrnn.bench.costs import GRU_UNIT_VALUES, LSTM_UNIT_VALUES, gated_rnn_flops, per_unit_bytes
from ctrlrnn.bench.grids import LAYER_FULL, LAYER_QUICK
from ctrlrnn.bench.workloads import make_input, module_workload
from ctrlrnn.ops import fused_cells
from ctrlrnn.ops.cached_linear import cached_linear


class _FusedLayer(nn.Module):
    """One layer on the fused cell engine: one GEMM for all input projections, then the op."""

    def __init__(self, width: int, gates: int, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.w_ih = nn.Parameter(torch.randn(gates * width, width) / width**0.5)
        self.b = nn.Parameter(torch.zeros(gates * width))
        self.w_hh = nn.Parameter(torch.randn(gates * width, width) / width**0.5)
        self.b_hh = nn.Parameter(torch.zeros(gates * width)) if kind == "gru" else None

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        proj = cached_linear(x, self.w_ih, self.b)
        if self.kind == "lstm":
            return fused_cells.lstm_sequence(proj, self.w_hh)
        return fused_cells.gru_sequence(proj, self.w_hh, self.b_hh)


@case("fused_lstm", group="layer", quick=LAYER_QUICK, full=LAYER_FULL,
      description="ctrlrnn fused LSTM cell (lstm_sequence) with its input GEMM, 1 layer")
def fused_lstm(p: Point, dtype: torch.dtype) -> Workload:
    m = _FusedLayer(p.width, 4, "lstm").to(dtype)
    return module_workload(m, make_input(p, dtype), gated_rnn_flops(p, p.width, p.width, 4),
                            per_unit_bytes(p, p.width, dtype, fwd=LSTM_UNIT_VALUES[0],
                                           bwd=LSTM_UNIT_VALUES[1]))


@case("fused_gru", group="layer", quick=LAYER_QUICK, full=LAYER_FULL,
      compare_to=("gru", "lstm"),
      description="ctrlrnn fused GRU cell (gru_sequence) with its input GEMM, 1 layer")
def fused_gru(p: Point, dtype: torch.dtype) -> Workload:
    m = _FusedLayer(p.width, 3, "gru").to(dtype)
    return module_workload(
        m, make_input(p, dtype), gated_rnn_flops(p, p.width, p.width, 3),
        per_unit_bytes(p, p.width, dtype, fwd=GRU_UNIT_VALUES[0], bwd=GRU_UNIT_VALUES[1]))
