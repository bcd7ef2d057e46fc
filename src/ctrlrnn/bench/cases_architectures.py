"""Benchmark rows for the fused cells and the controlled architectures, beside the papers'
baselines: the fused LSTM/GRU against ``nn.LSTM``/``nn.GRU``, CAS-LSTM (2 layers) against a
2-layer ``nn.LSTM`` (CAS-LSTM paper), RCRN against a 3-layer bidirectional ``nn.LSTM``
(RCRN paper table 10), CARNN and METAGROSS against ``nn.LSTM``.

Elementwise byte counts are the values a fused implementation must move per (batch, step,
unit), forward and backward, estimated from each unit's equations (inputs read, outputs and
saved states written); they set the floor, so an estimate errs on the low side.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ctrlrnn.bench.case_registry import Cost, Point, Workload, case
from ctrlrnn.bench.costs import (
    GRU_UNIT_VALUES,
    LSTM_UNIT_VALUES,
    gated_rnn_flops,
    gemm_cost,
    per_unit_bytes,
    sum_costs,
)
from ctrlrnn.bench.grids import LAYER_FULL, LAYER_QUICK, RCRN_FULL, RCRN_QUICK, TARGET_QUICK
from ctrlrnn.bench.workloads import make_input, module_workload, require
from ctrlrnn.ops import fused_cells


def _lstm_bytes(p: Point, dtype: torch.dtype, units: int) -> Cost:
    return per_unit_bytes(p, units, dtype, fwd=LSTM_UNIT_VALUES[0], bwd=LSTM_UNIT_VALUES[1])


# ---------------------------------------------------------------- baselines of the papers


@case("lstm2", group="layer", quick=TARGET_QUICK, full=LAYER_FULL, compare_to=(),
      description="torch.nn.LSTM, 2 layers (CAS-LSTM's baseline)")
def lstm2(p: Point, dtype: torch.dtype) -> Workload:
    m = nn.LSTM(p.width, p.width, num_layers=2, batch_first=True).to(dtype)
    flops = sum_costs(*(gated_rnn_flops(p, p.width, p.width, 4) for _ in range(2)))
    return module_workload(m, make_input(p, dtype), flops, _lstm_bytes(p, dtype, 2 * p.width))


@case("lstm3bi", group="layer", quick=RCRN_QUICK, full=RCRN_FULL, compare_to=(),
      description="torch.nn.LSTM, 3 layers, bidirectional (RCRN's baseline, table 10)")
def lstm3bi(p: Point, dtype: torch.dtype) -> Workload:
    H = p.width
    m = nn.LSTM(H, H, num_layers=3, bidirectional=True, batch_first=True).to(dtype)
    flops = sum_costs(*(2 * [gated_rnn_flops(p, H, H, 4)] + 4 * [gated_rnn_flops(p, 2 * H, H, 4)]))
    return module_workload(m, make_input(p, dtype), flops, _lstm_bytes(p, dtype, 6 * H))


# ---------------------------------------------------------------- fused cells


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
        proj = F.linear(x, self.w_ih, self.b)
        if self.kind == "lstm":
            return fused_cells.lstm_sequence(proj, self.w_hh)
        return fused_cells.gru_sequence(proj, self.w_hh, self.b_hh)


@case("fused_lstm", group="layer", quick=LAYER_QUICK, full=LAYER_FULL,
      description="ctrlrnn fused LSTM cell (lstm_sequence) with its input GEMM, 1 layer")
def fused_lstm(p: Point, dtype: torch.dtype) -> Workload:
    m = _FusedLayer(p.width, 4, "lstm").to(dtype)
    return module_workload(m, make_input(p, dtype), gated_rnn_flops(p, p.width, p.width, 4),
                            _lstm_bytes(p, dtype, p.width))


@case("fused_gru", group="layer", quick=LAYER_QUICK, full=LAYER_FULL,
      compare_to=("gru", "lstm"),
      description="ctrlrnn fused GRU cell (gru_sequence) with its input GEMM, 1 layer")
def fused_gru(p: Point, dtype: torch.dtype) -> Workload:
    m = _FusedLayer(p.width, 3, "gru").to(dtype)
    return module_workload(
        m, make_input(p, dtype), gated_rnn_flops(p, p.width, p.width, 3),
        per_unit_bytes(p, p.width, dtype, fwd=GRU_UNIT_VALUES[0], bwd=GRU_UNIT_VALUES[1]))


# ---------------------------------------------------------------- architectures


@case("caslstm", group="layer", quick=TARGET_QUICK, full=LAYER_FULL, compare_to=("lstm2",),
      description="ctrlrnn.CASLSTM, 2 layers (layer 2: 5 gate blocks and the vertical gate)")
def caslstm(p: Point, dtype: torch.dtype) -> Workload:
    H = p.width
    m = require("CASLSTM")(H, H, num_layers=2, batch_first=True).to(dtype)
    flops = sum_costs(gated_rnn_flops(p, H, H, 4), gated_rnn_flops(p, H, H, 5))
    # layer 2 also reads the lower cell (forward) and writes its gradient (backward)
    nbytes = sum_costs(_lstm_bytes(p, dtype, H), per_unit_bytes(p, H, dtype, fwd=9, bwd=13))
    return module_workload(m, make_input(p, dtype), flops, nbytes)


@case("rcrn", group="layer", quick=RCRN_QUICK, full=RCRN_FULL, compare_to=("lstm3bi",),
      description="ctrlrnn.RCRN, bidirectional, LSTM cells (3 BiLSTMs + listener scan)")
def rcrn(p: Point, dtype: torch.dtype) -> Workload:
    H = p.width
    m = require("RCRN")(H, H, bidirectional=True, batch_first=True).to(dtype)
    flops = sum_costs(*(6 * [gated_rnn_flops(p, H, H, 4)]))
    # 6 LSTM directions, plus eq 15-16 per direction: read h1, h2, h3, write c4, h4 (5);
    # backward reads grad h4, h1, h2, h3, c4 and writes their 3 gradients (8)
    nbytes = sum_costs(_lstm_bytes(p, dtype, 6 * H), per_unit_bytes(p, 2 * H, dtype, fwd=5, bwd=8))
    return module_workload(m, make_input(p, dtype), flops, nbytes)


def _carnn(variant: str):
    def build(p: Point, dtype: torch.dtype) -> Workload:
        H = p.width
        m = require("CARNN")(H, H, H, variant=variant, batch_first=True).to(dtype)
        x = make_input(p, dtype)
        context = torch.randn(p.batch, H).to(dtype)
        gates = {"n": 3, "i": 3, "s": 2}[variant]
        flops = gemm_cost(p.batch * p.length, H, gates * H)
        if variant == "n":
            flops = sum_costs(flops, gemm_cost(p.batch * p.length, H, 2 * H))
        params = [q for q in m.parameters() if q.requires_grad]
        return Workload(
            fn=lambda: m(x, context)[0], flops=flops,
            bytes=per_unit_bytes(p, H, dtype, fwd=gates + 1, bwd=2 * gates + 2),
            leaves=[x, *params], params=params)

    return build


for _v in ("n", "i", "s"):
    case(f"carnn_{_v}", group="layer", quick=TARGET_QUICK, full=LAYER_FULL,
         description=f"ctrlrnn.CARNN, {_v}CARNN, context of the same width")(_carnn(_v))


@case("metagross", group="layer", quick=TARGET_QUICK, full=LAYER_FULL,
      description="ctrlrnn.Metagross, depth 2, linear base, token depth gates, residual")
def metagross(p: Point, dtype: torch.dtype) -> Workload:
    H = p.width
    m = require("Metagross")(H, H, depth=2, base="linear", batch_first=True).to(dtype)
    n_units, internal = 3, 1
    flops = gemm_cost(p.batch * p.length, H, 3 * n_units * H + 2 * internal)
    # depth 2 (METAGROSS paper sec 2): 14 values per unit forward (56H bytes in fp32), 28 backward
    nbytes = per_unit_bytes(p, H, dtype, fwd=14, bwd=28)
    return module_workload(m, make_input(p, dtype), flops, nbytes)


@case("metagross_state", group="layer", quick=TARGET_QUICK, full=LAYER_FULL,
      description="ctrlrnn.Metagross(gates='state'): as printed, depth 2, linear base, residual")
def metagross_state(p: Point, dtype: torch.dtype) -> Workload:
    H = p.width
    m = require("Metagross")(H, H, depth=2, gates="state", batch_first=True).to(dtype)
    n_units, internal = 3, 1
    rows = p.batch * p.length
    # every base map reads (x_t, h_{t-1}): W x for all steps in one GEMM, U h_{t-1} per step
    flops = sum_costs(gemm_cost(rows, H, 3 * n_units * H + 2 * internal),
                 gemm_cost(rows, H, 3 * n_units * H))
    # per unit: read the 9 input maps, write the 9 pre-activations saved for backward, read the
    # residual, write h (20 values); backward reads them back with h_{t-1} and the output
    # gradient, writes dP and the residual's gradient (22)
    nbytes = per_unit_bytes(p, H, dtype, fwd=20, bwd=22)
    return module_workload(m, make_input(p, dtype), flops, nbytes)
