"""One :class:`~ctrlrnn.nn.rcrn.RCRNCell` step in eager mode with each of the three RNNs of RCRN
eq 1-14 (the two controllers and the listener's base) as one of torch's cell ops.

:meth:`GatedRNN.step <ctrlrnn.nn.gated_rnn.GatedRNN.step>` writes a step from its equations,
about a dozen ops per RNN (the biases folded, the input product, the recurrent product, the
gates one by one); ``torch.lstm_cell`` (``torch.gru_cell``) is the same step of eq 1-6 / 10-14
(torch's gate order and weight layout, which :class:`~ctrlrnn.nn.gated_rnn.GatedRNN` keeps) in
one call, differentiable. Eq 15-16 follow in four ops::

    c4_t = sigmoid(h1_t) * c4_{t-1} + (1 - sigmoid(h1_t)) * h3_t   (15: a lerp)
    h4_t = sigmoid(h2_t) * c4_t   (or h2_t * c4_t, as printed)    (16)

The results equal the written-out step's to float rounding (torch adds the two biases to their
products separately). Where a tracer records the step (``torch.compile``, ``torch.export``,
TorchScript, ONNX export) the written-out step runs, whose ops every exporter knows.

:func:`fused` is eq 1-16 with LSTM cells as one op (:func:`ctrlrnn.ops.cell_steps.kernels`),
and one autograd node where a graph is recorded (:mod:`ctrlrnn.ops.cell_step_grads`); its
readable twin is :func:`ctrlrnn.ops.cell_steps.reference.rcrn_cell_step_ref`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ctrlrnn.nn.parameter_lookup import parameters
from ctrlrnn.ops import cell_step_grads, cell_steps, scan_export
from ctrlrnn.ops.compiled_op import eager_ok


def applies(x: Tensor) -> bool:
    """Whether :func:`step` serves a call on ``x``: eager mode, nothing tracing or exporting."""
    return eager_ok(x) and not scan_export.active()


def step(cell: Any, x: Tensor, st: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
    """``(h4, new states)`` of one step (module docstring) from ``x`` ``(B, D)`` and the states
    ``st`` in the order of ``cell.state_names``, each ``(B, H)``."""
    new: list[Tensor] = []
    if cell.cell == "lstm":  # eq 1-6, 10-14
        for j, rnn in enumerate(cell.rnns()):
            new += torch.lstm_cell(x, (st[2 * j], st[2 * j + 1]), rnn.weight_ih, rnn.weight_hh,
                                   rnn.bias_ih, rnn.bias_hh)  # fmt: skip
        h1, h2, h3 = new[0], new[2], new[4]
    else:
        for j, rnn in enumerate(cell.rnns()):
            new.append(torch.gru_cell(x, st[j], rnn.weight_ih, rnn.weight_hh, rnn.bias_ih,
                                      rnn.bias_hh))  # fmt: skip
        h1, h2, h3 = new
    c4 = torch.lerp(h3, st[-1], torch.sigmoid(h1))  # eq 15
    new.append(c4)
    gate = torch.sigmoid(h2) if cell.output_gate == "sigmoid" else h2
    return gate * c4, new  # eq 16


def fused(cell: Any, x: Tensor, st: list[Tensor]) -> list[Tensor] | None:
    """``[h4, *new states]`` of one step by the fused op (module docstring), or None where it
    does not apply (GRU cells among them). Where a graph is recorded the step is one autograd
    node (:func:`ctrlrnn.ops.cell_step_grads.rcrn_cell_step_train`)."""
    got = fused_steps(cell, [x], st)
    return None if got is None else [got[0][0], *got[1]]


def fused_steps(cell: Any, xs: list[Tensor], st: list[Tensor]
                ) -> tuple[list[Tensor], list[Tensor]] | None:  # fmt: skip
    """The outputs ``h4`` of the steps ``xs`` (each ``(B, D)``, contiguous) from the states
    ``st``, and the states after the last, by the fused op (module docstring), or None where
    it does not apply. The weights are read and the operands checked once: every later step's
    states are the op's own outputs. Without a graph all the steps are one call of the op;
    where a graph is recorded each step is one autograd node
    (:func:`ctrlrnn.ops.cell_step_grads.rcrn_cell_step_train`)."""
    if cell.cell != "lstm":
        return None
    weights, biases = [], []
    for rnn in cell.rnns():
        w_ih, w_hh, b_ih, b_hh = parameters(rnn, "weight_ih", "weight_hh", "bias_ih", "bias_hh")
        weights += (w_ih, w_hh)
        biases += (b_ih, b_hh)
    # (the op makes its weights contiguous and checks their dtype and device itself)
    ext = cell_steps.kernels(xs[0], *st, graph=True)
    if ext is None or not cell_steps.plain(weights + biases):
        return None
    sigmoid_gate = cell.output_gate == "sigmoid"
    operands = (xs[0], *st, *weights, *biases)
    if cell_step_grads.records_graph(*operands):
        hs: list[Tensor] = []
        for x in xs:
            got = cell_step_grads.rcrn_cell_step_train(ext, x, st, weights, biases,
                                                       sigmoid_gate)  # fmt: skip
            hs.append(got[0])
            st = got[1:]
        return hs, st
    x = xs[0] if len(xs) == 1 else torch.stack(xs)  # (T, B, D): the steps in one call
    got = ext.rcrn_cell_step(x, st, weights, biases, sigmoid_gate)
    return ([got[0]] if len(xs) == 1 else list(got[0].unbind(0))), got[1:]
