"""Benchmark rows of the torch baselines the layers are compared with: ``torch.nn.LSTM`` and
``torch.nn.GRU``, one layer, input = hidden = width; and the papers' baselines, a 2-layer
``nn.LSTM`` (CAS-LSTM paper) and a 3-layer bidirectional one (RCRN paper table 10)."""

from __future__ import annotations

import torch
from torch import nn

from ctrlrnn.bench.case_registry import Cost, Point, Workload, case
from ctrlrnn.bench.costs import (
    GRU_UNIT_VALUES,
    LSTM_UNIT_VALUES,
    gated_rnn_flops,
    per_unit_bytes,
    sum_costs,
)
from ctrlrnn.bench.grids import LAYER_FULL, LAYER_QUICK, RCRN_FULL, RCRN_QUICK, TARGET_QUICK
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


def _lstm_bytes(p: Point, dtype: torch.dtype, units: int) -> Cost:
    return per_unit_bytes(p, units, dtype, fwd=LSTM_UNIT_VALUES[0], bwd=LSTM_UNIT_VALUES[1])


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


@case("rcrn_torch_lstms", group="layer", quick=RCRN_QUICK[:1], full=RCRN_FULL,
      compare_to=("lstm3bi",),
      description="3 one-layer bidirectional torch.nn.LSTMs over one input: RCRN's controllers "
                  "and listener base as it runs them on torch's kernels, without the listener "
                  "(its floor there)")
def rcrn_torch_lstms(p: Point, dtype: torch.dtype) -> Workload:
    """The three BiLSTMs of an ``RCRN(width, width, bidirectional=True)`` layer (eq 1-14: the
    two controllers and the listener's base) as separate ``nn.LSTM`` calls on the same
    batch-first input, as ``RCRN`` makes them where its controllers run natively; the outputs
    are the three, so the backward takes a gradient for each, as the listener gives them."""
    H = p.width
    ms = [nn.LSTM(H, H, bidirectional=True, batch_first=True).to(dtype) for _ in range(3)]
    x = make_input(p, dtype)
    params = [q for m in ms for q in m.parameters()]
    return Workload(
        fn=lambda: tuple(m(x)[0] for m in ms),
        flops=sum_costs(*(6 * [gated_rnn_flops(p, H, H, 4)])),
        bytes=_lstm_bytes(p, dtype, 6 * H),
        leaves=[x, *params],
        params=params,
    )
