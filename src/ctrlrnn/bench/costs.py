"""Cost models of the benchmark rows: matmul FLOPs and the fewest elementwise bytes.

The roofline floor of a row is ``FLOPs / GEMM rate + bytes / copy bandwidth``; the functions
here give both for the usual building blocks (a GEMM, a gated RNN layer, a QRNN layer, values
moved per (batch, step, unit)).
"""

from __future__ import annotations

import torch

from ctrlrnn.bench.case_registry import Cost, Point


def gemm_cost(m: int, k: int, n: int) -> Cost:
    """FLOPs of ``(m, k) @ (k, n)``: ``2*m*k*n`` forward, twice that backward (input and
    weight gradients)."""
    f = 2.0 * m * k * n
    return Cost(fwd=f, bwd=2.0 * f)


def gated_rnn_flops(p: Point, input_size: int, hidden: int, gates: int) -> Cost:
    """Matmul FLOPs of a 1-layer gated RNN (LSTM: 4 gates, GRU: 3): the input projection and the
    recurrent projection, ``2*B*T*(input_size + hidden)*(gates*hidden)`` forward."""
    return gemm_cost(p.batch * p.length, input_size + hidden, gates * hidden)


def qrnn_flops(p: Point, input_size: int, hidden: int, window: int, gates: int) -> Cost:
    """Matmul FLOPs of a QRNN layer: the causal convolution of width ``window`` as one GEMM,
    ``2*B*T*(window*input_size)*(gates*hidden)`` forward."""
    return gemm_cost(p.batch * p.length, window * input_size, gates * hidden)


def per_unit_bytes(p: Point, units: int, dtype: torch.dtype, *, fwd: int, bwd: int) -> Cost:
    """Elementwise bytes when each of ``B*T*units`` positions moves ``fwd`` (forward) and
    ``bwd`` (backward) values of ``dtype``."""
    n = p.batch * p.length * units * _itemsize(dtype)
    return Cost(fwd=float(n * fwd), bwd=float(n * bwd))


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


#: Elementwise values per (batch, step, unit) of the fused LSTM cell: forward reads the 4 gate
#: pre-activations and c_{t-1}, writes h_t and c_t; backward reads the 4 saved gate
#: activations, c_t and grad h_t, writes the 4 gate gradients.
LSTM_UNIT_VALUES = (7, 10)
#: GRU: forward reads 3 input and 3 recurrent pre-activations and h_{t-1}, writes h_t; backward
#: reads the saved r, z, n and the recurrent n pre-activation, h_{t-1} and grad h_t, writes 3+3
#: pre-activation gradients.
GRU_UNIT_VALUES = (8, 12)
#: Linear scan per element: forward reads a, b and writes h; backward reads grad h, a, h and
#: writes grad a, grad b.
SCAN_ELEMENT_VALUES = (3, 5)
#: QRNN pooling gates per pooling mode.
QRNN_GATES = {"f": 2, "fo": 3, "ifo": 4}


def qrnn_unit_values(pooling: str) -> tuple[int, int]:
    """Elementwise values per (batch, step, unit) of the fused QRNN pooling: forward reads the G
    gate pre-activations and writes h and c (f-pooling: h is c, one write); backward reads the
    G gates, c and grad h, writes the G gate gradients."""
    g = QRNN_GATES[pooling]
    fwd = g + (1 if pooling == "f" else 2)
    return fwd, 2 * g + 2


def sum_costs(*costs: Cost) -> Cost:
    """The forward and the backward amounts of ``costs`` added up."""
    return Cost(fwd=sum(c.fwd for c in costs), bwd=sum(c.bwd for c in costs))
