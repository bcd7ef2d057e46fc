"""A short CAS-LSTM call without a recorded graph, step by step: every layer's step one fused
op (``caslstm_cell_step``, CAS-LSTM eq 1-6 for layer 1, eq 7-13 and 17 above), the cell of the
layer below at the same step as ``c^{l-1}_t``. The layer (:class:`ctrlrnn.nn.cas_lstm.CASLSTM`)
runs it before its whole-sequence path."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ctrlrnn.nn.base import STEP_PATH_MAX_LENGTH, State
from ctrlrnn.ops import cell_steps
from ctrlrnn.ops.compiled_op import eager_ok

__all__ = ["stack_by_steps"]


def stack_by_steps(
    cas: Any, x: Tensor, lengths: Tensor | None, states: State | None
) -> tuple[Tensor, State] | None:
    """The outputs and final states of ``cas`` (a :class:`~ctrlrnn.nn.cas_lstm.CASLSTM`; not
    imported here, which imports this module) on ``x`` for a short call where no graph is
    recorded (a decoding or streaming step at a small batch): each direction's stack step by
    step, every layer's step one fused op (module docstring); or None where the whole-sequence
    path runs (:meth:`RecurrentBase._layer_by_steps` says when)."""
    if torch.is_grad_enabled() or not eager_ok(x) or lengths is not None:
        return None
    if (cas.weight_drop or cas.dropout) and cas.training:
        return None
    B, T = x.shape[0], x.shape[1]
    if T == 0 or T > STEP_PATH_MAX_LENGTH or B > cell_steps.MAX_BATCH:
        return None
    L, D, H = cas.num_layers, cas.num_directions, cas.hidden_size
    xs = [x[:, t].contiguous() for t in range(T)]
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
                lam = lams[layer]
                vec = lam if isinstance(lam, Tensor) else None
                if i == 0:  # (later steps' operands are the op's own outputs)
                    ext = cell_steps.kernels(inp, h[layer], c[layer], low, w.weight_ih,
                                             w.weight_hh, w.bias, vec, w.peephole)  # fmt: skip
                    if ext is None:  # nothing is written until the stack returns
                        return None
                mode = 0 if lam is None else (2 if vec is not None else 1)
                h[layer], c[layer] = ext.caslstm_cell_step(
                    inp, h[layer], c[layer], low, w.weight_ih, w.weight_hh, w.bias, vec,
                    0.0 if mode != 1 else float(lam), mode, w.peephole)  # type: ignore[arg-type]
                inp, low = h[layer], c[layer]
            top[t] = inp
        outs.append(torch.stack(top, 1))
        finals_h += h
        finals_c += c
    order = [d * L + layer for layer in range(L) for d in range(D)]  # layer-major
    out = outs[0] if D == 1 else torch.cat(outs, -1)
    return out, [torch.stack([finals_h[i] for i in order], 0),
                 torch.stack([finals_c[i] for i in order], 0)]
