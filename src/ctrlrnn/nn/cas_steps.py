"""A short CAS-LSTM call without a recorded graph, step by step: every layer's step one fused
op (``caslstm_cell_step``, CAS-LSTM eq 1-6 for layer 1, eq 7-13 and 17 above), the cell of the
layer below at the same step as ``c^{l-1}_t``. The layer (:class:`ctrlrnn.nn.cas_lstm.CASLSTM`)
runs it before its whole-sequence path."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ctrlrnn.nn.base import State, short_call_steps
from ctrlrnn.ops import cell_steps

__all__ = ["lambda_operands", "stack_by_steps"]


def lambda_operands(lam: float | Tensor | None) -> tuple[Tensor | None, float, int]:
    """``caslstm_cell_step``'s ``(lambda_vec, lambda_value, lambda_mode)`` for eq 12's lambda
    ``lam``: None (eq 18's plain sum, mode 0), a number (mode 1) or an ``(H,)`` tensor (mode 2)."""
    if lam is None:
        return None, 0.0, 0
    if isinstance(lam, Tensor):
        return lam, 0.0, 2
    return None, float(lam), 1


def stack_by_steps(
    cas: Any, x: Tensor, lengths: Tensor | None, states: State | None
) -> tuple[Tensor, State] | None:
    """The outputs and final states of ``cas`` (a :class:`~ctrlrnn.nn.cas_lstm.CASLSTM`; not
    imported here, which imports this module) on ``x`` for a short call where no graph is
    recorded (a decoding or streaming step at a small batch): each direction's stack step by
    step, every layer's step one fused op (module docstring); or None where the whole-sequence
    path runs (:func:`ctrlrnn.nn.base.short_call_steps` says when)."""
    xs = short_call_steps(cas, x, lengths, bool(cas.weight_drop or cas.dropout))
    if xs is None:
        return None
    B, T = x.shape[0], len(xs)
    L, D, H = cas.num_layers, cas.num_directions, cas.hidden_size
    finals_h: list[Tensor] = []
    finals_c: list[Tensor] = []
    outs: list[Tensor] = []
    for d in range(D):
        ws = [cas.layer(layer, d) for layer in range(L)]
        lams = [None] + [cas.lambda_value(layer, d) for layer in range(1, L)]
        h = [x.new_zeros(B, H) if states is None else states[0][layer * D + d]
             for layer in range(L)]  # fmt: skip
        c = [x.new_zeros(B, H) if states is None else states[1][layer * D + d]
             for layer in range(L)]  # fmt: skip
        top: list[Tensor] = [x] * T
        for i, t in enumerate(range(T) if d == 0 else range(T - 1, -1, -1)):
            inp, low = xs[t], None
            for layer, w in enumerate(ws):
                vec, value, mode = lambda_operands(lams[layer])
                if i == 0:  # (later steps' operands are the op's own outputs)
                    ext = cell_steps.kernels(inp, h[layer], c[layer], low, w.weight_ih,
                                             w.weight_hh, w.bias, vec, w.peephole)  # fmt: skip
                    if ext is None:  # nothing is written until the stack returns
                        return None
                h[layer], c[layer] = ext.caslstm_cell_step(
                    inp, h[layer], c[layer], low, w.weight_ih, w.weight_hh, w.bias, vec, value,
                    mode, w.peephole)
                inp, low = h[layer], c[layer]
            top[t] = inp
        outs.append(torch.stack(top, 1))
        finals_h += h
        finals_c += c
    order = [d * L + layer for layer in range(L) for d in range(D)]  # layer-major
    out = outs[0] if D == 1 else torch.cat(outs, -1)
    return out, [torch.stack([finals_h[i] for i in order], 0),
                 torch.stack([finals_c[i] for i in order], 0)]
