"""What the fused steps' backward ops (``cell_step_grads.cpp``) compute: the gradients of the
readable steps of :mod:`ctrlrnn.ops.cell_steps.reference` by plain autograd, in the op's
argument order. The tests hold each op to its reference here.

* :func:`rcrn_cell_step_backward_ref`: the gradients of RCRN paper eq 1-16 (LSTM cells), one
  step (:func:`~ctrlrnn.ops.cell_steps.reference.rcrn_cell_step_ref`).
* :func:`metagross_step_backward_ref`: the gradients of METAGROSS paper eq 2-1..2-6 (a linear
  base, token depth gates), one step of the whole tree
  (:func:`~ctrlrnn.ops.cell_steps.reference.metagross_cell_step_ref`), or as printed in
  section 2 (:func:`~ctrlrnn.ops.cell_steps.reference.metagross_printed_step_ref`).
* :func:`caslstm_step_backward_ref`: the gradients of CAS-LSTM paper eq 1-6 (the first layer)
  or eq 7-13 and 17 (above it), one step
  (:func:`~ctrlrnn.ops.cell_steps.reference.caslstm_cell_step_ref`).
* :func:`carnn_step_backward_ref`: the gradients of CARNN paper eq 3, 5 or 6, one step
  (:func:`~ctrlrnn.ops.cell_steps.reference.carnn_cell_step_ref`).
* :func:`qrnn_step_backward_ref`: the gradients of QRNN paper eq 1-5, one step
  (:func:`~ctrlrnn.ops.cell_steps.reference.qrnn_cell_step_ref`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ctrlrnn.ops.cell_steps.reference import (
    carnn_cell_step_ref,
    caslstm_cell_step_ref,
    metagross_cell_step_ref,
    metagross_printed_step_ref,
    qrnn_cell_step_ref,
    rcrn_cell_step_ref,
)

__all__ = ["carnn_step_backward_ref", "caslstm_step_backward_ref", "metagross_step_backward_ref",
           "qrnn_step_backward_ref", "rcrn_cell_step_backward_ref"]


def _gradients(outs: Sequence[Tensor], grads: Sequence[Tensor | None],
               inputs: Sequence[Tensor | None]) -> list[Tensor]:  # fmt: skip
    """The gradients of ``inputs`` given those of ``outs`` (None for none, as for an output
    the op did not get): zeros for an input no given output reaches, ``(0,)`` for an absent
    input (None)."""
    pairs = [(o, g) for o, g in zip(outs, grads, strict=True) if g is not None]
    wanted = [t for t in inputs if t is not None]
    got = iter(torch.autograd.grad([o for o, _ in pairs], wanted, [g for _, g in pairs],
                                   allow_unused=True)
               if pairs else [None] * len(wanted))  # fmt: skip
    like = wanted[0]
    result = []
    for t in inputs:
        g = None if t is None else next(got)
        result.append(like.new_zeros(0) if t is None else torch.zeros_like(t) if g is None else g)
    return result


def rcrn_cell_step_backward_ref(
    grads: Sequence[Tensor | None], x: Tensor, states: Sequence[Tensor],
    weights: Sequence[Tensor], biases: Sequence[Tensor | None], sigmoid_gate: bool,
) -> list[Tensor]:  # fmt: skip
    """``[dx, *d states (7), *d weights (6), *d biases (3)]`` of one RCRN step (LSTM cells)
    given the gradients ``grads`` of its outputs ``(h4, h1, c1, h2, c2, h3, c3, c4)`` (None for
    none); a cell's bias gradient is that of ``bias_ih`` and ``bias_hh`` alike (the two add)."""
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_(True) for t in (x, *states, *weights)]
        # an absent bias as a zero one: its gradient is the one the op returns
        bias = [(x.new_zeros(weights[0].shape[0]) if b is None else b.detach()).requires_grad_(True)
                for b in biases]  # fmt: skip
        out = rcrn_cell_step_ref(leaves[0], leaves[1:8], leaves[8:14], bias, sigmoid_gate)
    # each cell's bias_ih (bias_hh's gradient is the same)
    return _gradients(out, grads, leaves + bias[::2])


def metagross_step_backward_ref(
    grad_h: Tensor | None, grad_last: Tensor | None, x: Tensor, state: Tensor, weight: Tensor,
    bias: Tensor | None, weight_hh: Tensor | None, depth_weight: Tensor | None,
    depth_bias: Tensor | None, depth: int, h_form: bool, residual: bool,
) -> list[Tensor]:  # fmt: skip
    """``[dx, dstate, dweight, dbias, dweight_hh, ddepth_weight, ddepth_bias]`` of one METAGROSS
    step given the gradients of its root output ``h`` and its units' new states (None for none;
    as printed, ``weight_hh`` given, ``state`` is the root's ``h_{t-1}`` and the step has ``h``
    alone); an absent parameter's gradient is that of a zero one, ``(0,)`` for the two absent
    weights."""
    I = 2 ** (depth - 1) - 1

    def leaf(t: Tensor | None, size: int) -> Tensor:  # an absent parameter as a zero one
        return (x.new_zeros(size) if t is None else t.detach()).requires_grad_(True)

    with torch.enable_grad():
        xl, sl, wl = (t.detach().requires_grad_(True) for t in (x, state, weight))
        b, db = leaf(bias, weight.shape[0]), leaf(depth_bias, 2 * I)
        u = None if weight_hh is None else leaf(weight_hh, 0)
        dw = None if depth_weight is None else leaf(depth_weight, 0)
        gate_bias = None if dw is None else db
        if u is None:
            outs = list(metagross_cell_step_ref(xl, sl, wl, b, dw, gate_bias, depth, h_form,
                                                residual))  # fmt: skip
        else:
            outs = [metagross_printed_step_ref(xl, sl, wl, b, u, dw, gate_bias, depth, residual)]
    return _gradients(outs, (grad_h, grad_last)[: len(outs)], (xl, sl, wl, b, u, dw, db))


def caslstm_step_backward_ref(
    grad_h: Tensor | None, grad_c: Tensor | None, x: Tensor, h: Tensor, c: Tensor,
    lower_c: Tensor | None, weight_ih: Tensor, weight_hh: Tensor, bias: Tensor | None,
    lambda_vec: Tensor | None, lambda_value: float, lambda_mode: int, peephole: Tensor | None,
) -> list[Tensor]:  # fmt: skip
    """``[dx, dh, dc, dlower_c, dweight_ih, dweight_hh, dbias, dlambda_vec, dpeephole]`` of one
    CAS-LSTM step given the gradients of its new ``h`` and ``c`` (None for none); an absent
    bias's gradient is that of a zero one, ``(0,)`` for the other absent tensors."""
    def leaf(t: Tensor | None) -> Tensor | None:
        return None if t is None else t.detach().requires_grad_(True)

    with torch.enable_grad():
        b = leaf(x.new_zeros(weight_ih.shape[0]) if bias is None else bias)
        given = [leaf(t) for t in (x, h, c, lower_c, weight_ih, weight_hh)]
        vec, peep = leaf(lambda_vec), leaf(peephole)
        xl, hl, cl, low, w_ih, w_hh = given
        outs = caslstm_cell_step_ref(xl, hl, cl, low, w_ih, w_hh, b, vec, lambda_value,
                                     lambda_mode, peep)  # fmt: skip
    return _gradients(outs, (grad_h, grad_c), (xl, hl, cl, low, w_ih, w_hh, b, vec, peep))


def carnn_step_backward_ref(
    grad_h: Tensor | None, x: Tensor, h: Tensor, weight_ih: Tensor, bias_ih: Tensor | None,
    context: Tensor | None, weight_ch: Tensor | None, weight_hh: Tensor | None,
) -> list[Tensor]:  # fmt: skip
    """``[dx, dh, dweight_ih, dbias_ih, dcontext, dweight_ch, dweight_hh]`` of one CARNN step
    given the gradient of its new ``h`` (None for none); an absent bias's gradient is that of a
    zero one, ``(0,)`` for the other absent tensors."""
    with torch.enable_grad():
        b = (x.new_zeros(weight_ih.shape[0]) if bias_ih is None else bias_ih.detach())
        order = [None if t is None else t.detach().requires_grad_(True)
                 for t in (x, h, weight_ih, b, context, weight_ch, weight_hh)]  # fmt: skip
        out = carnn_cell_step_ref(*order)
    return _gradients([out], [grad_h], order)


def qrnn_step_backward_ref(
    grad_h: Tensor | None, grad_c: Tensor | None, grad_history: Tensor | None, x: Tensor,
    c: Tensor, history: Tensor, weight: Tensor, bias: Tensor | None, mode: int,
) -> list[Tensor]:  # fmt: skip
    """``[dx, dc, dhistory, dweight, dbias]`` of one QRNN step given the gradients of its
    ``h``, new ``c`` and new history (None for none); an absent bias's gradient is that of a
    zero one."""
    with torch.enable_grad():
        b = x.new_zeros(weight.shape[0]) if bias is None else bias.detach()
        wanted = [t.detach().requires_grad_(True) for t in (x, c, history, weight, b)]
        outs = qrnn_cell_step_ref(*wanted, mode)
    return _gradients(outs, (grad_h, grad_c, grad_history), wanted)
