"""Fused cell steps that record a graph, on CPU: the forward is the step's op of
:mod:`ctrlrnn.ops.cell_steps` keeping what its backward reads, the backward one op of the
``scan`` extension (``cell_step_grads.cpp``), the pair one autograd node per step.

* :func:`rcrn_cell_step_train`: RCRN paper eq 1-16 with LSTM cells (``rcrn_cell_step`` with
  ``save``; ``rcrn_cell_step_backward``);
* :func:`metagross_step_train`: METAGROSS paper eq 2-1..2-6 with a linear base and token depth
  gates, or as printed in section 2 (``metagross_cell_step`` or ``metagross_printed_step`` with
  ``saved``; ``metagross_step_backward``);
* :func:`caslstm_step_train`: CAS-LSTM paper eq 1-6 (the first layer) or eq 7-13 and 17 (above
  it) (``caslstm_cell_step`` with ``saved``; ``caslstm_step_backward``);
* :func:`carnn_step_train`: CARNN paper eq 3, 5 or 6 (``carnn_cell_step`` with ``saved``;
  ``carnn_step_backward``);
* :func:`qrnn_step_train`: QRNN paper eq 1-5 (``qrnn_cell_step`` with ``saved``;
  ``qrnn_step_backward``).

A cell's step with grad written in tensor ops is a dozen or more ops and their autograd nodes,
and a short call that trains (a few tokens at batch 1 to 4) through a layer's whole-sequence
path pays a fixed cost per call (the stacked recurrences, their projections and their nodes)
many times its arithmetic; a step here is one node. :func:`kernels` says where a step may take
it: where :func:`ctrlrnn.ops.cell_steps.kernels` would but with grad enabled. Each backward is a
kernel without a derivative of its own: a double backward raises the error of
:mod:`ctrlrnn.ops.double_backward`. Each backward's readable twin is the autograd of its step's
reference (:mod:`.reference`), which the tests hold it to.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from ctrlrnn.ops import cell_steps
from ctrlrnn.ops.cell_step_grads.reference import (
    carnn_step_backward_ref,
    caslstm_step_backward_ref,
    metagross_step_backward_ref,
    qrnn_step_backward_ref,
    rcrn_cell_step_backward_ref,
)
from ctrlrnn.ops.double_backward import without_derivative

__all__ = ["carnn_step_backward_ref", "carnn_step_train", "caslstm_step_backward_ref",
           "caslstm_step_train", "kernels", "metagross_step_backward_ref",
           "metagross_step_train", "qrnn_step_backward_ref", "qrnn_step_train",
           "rcrn_cell_step_backward_ref", "rcrn_cell_step_train", "records_graph"]


def records_graph(*tensors: Tensor | None) -> bool:
    """Whether a call on ``tensors`` may record autograd (reverse or forward mode)."""
    if getattr(torch.autograd.forward_ad, "_current_level", -1) >= 0:
        return True
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def kernels(x: Tensor, *tensors: Tensor | None) -> Any | None:
    """The ``scan`` extension where a step on ``x`` with the operands ``tensors`` may record
    its graph through the ops here (the conditions of :func:`ctrlrnn.ops.cell_steps.kernels`,
    grad enabled), else None."""
    return cell_steps.kernels(x, *tensors, graph=True)


class _RCRNStep(torch.autograd.Function):
    """``(sigmoid_gate, x, 7 states, 6 weights, 6 biases) -> (h4, 7 new states)``."""

    @staticmethod
    def forward(ctx: Any, ext: Any, sigmoid_gate: bool, x: Tensor,  # type: ignore[override]
                *operands: Tensor | None) -> tuple[Tensor, ...]:  # fmt: skip
        states, weights, biases = operands[:7], operands[7:13], operands[13:]
        out = ext.rcrn_cell_step(x, states, weights, biases, sigmoid_gate, True)
        ctx.ext, ctx.sigmoid_gate = ext, sigmoid_gate
        ctx.has_bias = tuple(b is not None for b in biases)
        ctx.save_for_backward(x, *states, *weights, *out[1:])  # the new states, the gates
        ctx.set_materialize_grads(False)
        return tuple(out[:8])

    @staticmethod
    def backward(ctx: Any, *grads: Tensor | None) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        saved = ctx.saved_tensors
        with torch.no_grad():
            got = ctx.ext.rcrn_cell_step_backward(list(grads), saved[0], saved[1:8],
                                                  saved[8:14], saved[14:21], saved[21],
                                                  ctx.sigmoid_gate)  # fmt: skip
        bias = [got[14 + j // 2] if given else None for j, given in enumerate(ctx.has_bias)]
        out: tuple[Tensor | None, ...] = (*got[:14], *bias)
        out = without_derivative(out, "rcrn_cell_step_backward", "RCRN, RCRNCell")
        return (None, None, *out)


def rcrn_cell_step_train(
    ext: Any, x: Tensor, states: Sequence[Tensor], weights: Sequence[Tensor],
    biases: Sequence[Tensor | None], sigmoid_gate: bool,
) -> list[Tensor]:  # fmt: skip
    """``[h4, h1, c1, h2, c2, h3, c3, c4]`` of one RCRN step (eq 1-16, LSTM cells), as
    :func:`~ctrlrnn.ops.cell_steps.reference.rcrn_cell_step_ref` with its arguments, one
    autograd node; ``ext`` is what :func:`kernels` gave for these operands."""
    return list(_RCRNStep.apply(ext, bool(sigmoid_gate), x, *states, *weights, *biases))


class _MetagrossStep(torch.autograd.Function):
    """``(x, state, weight, bias, weight_hh, depth_weight, depth_bias) -> (h, last)``; as
    printed (``weight_hh`` given) ``last`` is None."""

    @staticmethod
    def forward(ctx: Any, ext: Any, depth: int, h_form: bool, residual: bool,  # type: ignore[override]
                x: Tensor, state: Tensor, weight: Tensor, bias: Tensor | None,
                weight_hh: Tensor | None, depth_weight: Tensor | None,
                depth_bias: Tensor | None) -> tuple[Tensor, Tensor | None]:  # fmt: skip
        N, I = 2**depth - 1, 2 ** (depth - 1) - 1
        H = weight.shape[0] // (3 * N)
        saved = x.new_empty(x.shape[0], 3 * N * H + 2 * I + N * H)
        last: Tensor | None = None
        if weight_hh is None:
            h, last = ext.metagross_cell_step(x, state, weight, bias, depth_weight, depth_bias,
                                              depth, h_form, residual, saved)  # fmt: skip
        else:
            h = ext.metagross_printed_step(x, state, weight, bias, weight_hh, depth_weight,
                                           depth_bias, depth, residual, saved)  # fmt: skip
        ctx.ext, ctx.flags = ext, (depth, h_form, residual)
        ctx.has_depth_bias = depth_bias is not None
        ctx.save_for_backward(x, state, weight, bias, weight_hh, depth_weight, saved)
        ctx.set_materialize_grads(False)
        return h, last

    @staticmethod
    def backward(ctx: Any, grad_h: Tensor | None, grad_last: Tensor | None  # type: ignore[override]
                 ) -> tuple[Tensor | None, ...]:  # fmt: skip
        x, state, weight, bias, weight_hh, depth_weight, saved = ctx.saved_tensors
        with torch.no_grad():
            got = ctx.ext.metagross_step_backward(grad_h, grad_last, x, state, weight, bias,
                                                  weight_hh, depth_weight, saved, *ctx.flags)
        given = (True, True, True, bias is not None, weight_hh is not None,
                 depth_weight is not None, ctx.has_depth_bias)  # fmt: skip
        out = tuple(g if k else None for g, k in zip(got, given, strict=True))
        out = without_derivative(out, "metagross_step_backward",
                                 "Metagross and MetagrossCell with a linear base")
        return (None, None, None, None, *out)


def metagross_step_train(
    ext: Any, x: Tensor, state: Tensor, weight: Tensor, bias: Tensor | None,
    weight_hh: Tensor | None, depth_weight: Tensor | None, depth_bias: Tensor | None,
    depth: int, h_form: bool, residual: bool,
) -> list[Tensor]:  # fmt: skip
    """``[h, new states]`` of one METAGROSS step, as
    :func:`~ctrlrnn.ops.cell_steps.reference.metagross_cell_step_ref` with its arguments, or
    ``[h]`` as printed (``weight_hh`` given, ``state`` the root's ``h_{t-1}``, as
    :func:`~ctrlrnn.ops.cell_steps.reference.metagross_printed_step_ref`), one autograd node;
    ``ext`` is what :func:`kernels` gave for these operands."""
    h, last = _MetagrossStep.apply(ext, int(depth), bool(h_form), bool(residual), x, state,
                                   weight, bias, weight_hh, depth_weight, depth_bias)
    return [h] if last is None else [h, last]


class _CASLSTMStep(torch.autograd.Function):
    """``(x, h, c, lower_c, weight_ih, weight_hh, bias, lambda_vec, peephole) -> (h', c')``."""

    @staticmethod
    def forward(ctx: Any, ext: Any, lambda_value: float, lambda_mode: int,  # type: ignore[override]
                x: Tensor, h: Tensor, c: Tensor, lower_c: Tensor | None, weight_ih: Tensor,
                weight_hh: Tensor, bias: Tensor | None, lambda_vec: Tensor | None,
                peephole: Tensor | None) -> tuple[Tensor, Tensor]:  # fmt: skip
        saved = x.new_empty(x.shape[0], weight_ih.shape[0])
        h_new, c_new = ext.caslstm_cell_step(x, h, c, lower_c, weight_ih, weight_hh, bias,
                                             lambda_vec, lambda_value, lambda_mode, peephole,
                                             saved)  # fmt: skip
        ctx.ext, ctx.lam = ext, (lambda_value, lambda_mode)
        ctx.has_bias = bias is not None
        ctx.save_for_backward(x, h, c, lower_c, weight_ih, weight_hh, lambda_vec, peephole,
                              c_new, saved)  # fmt: skip
        ctx.set_materialize_grads(False)
        return h_new, c_new

    @staticmethod
    def backward(ctx: Any, grad_h: Tensor | None, grad_c: Tensor | None  # type: ignore[override]
                 ) -> tuple[Tensor | None, ...]:  # fmt: skip
        x, h, c, low, w_ih, w_hh, vec, peep, c_new, saved = ctx.saved_tensors
        with torch.no_grad():
            got = ctx.ext.caslstm_step_backward(grad_h, grad_c, x, h, c, low, w_ih, w_hh, vec,
                                                *ctx.lam, peep, c_new, saved)  # fmt: skip
        given = (True, True, True, low is not None, True, True, ctx.has_bias, vec is not None,
                 peep is not None)  # fmt: skip
        out = tuple(g if k else None for g, k in zip(got, given, strict=True))
        out = without_derivative(out, "caslstm_step_backward", "CASLSTMCell")
        return (None, None, None, *out)


def caslstm_step_train(
    ext: Any, x: Tensor, h: Tensor, c: Tensor, lower_c: Tensor | None, weight_ih: Tensor,
    weight_hh: Tensor, bias: Tensor | None, lambda_vec: Tensor | None, lambda_value: float,
    lambda_mode: int, peephole: Tensor | None,
) -> list[Tensor]:  # fmt: skip
    """``[h', c']`` of one CAS-LSTM step, as
    :func:`~ctrlrnn.ops.cell_steps.reference.caslstm_cell_step_ref` with its arguments, one
    autograd node; ``ext`` is what :func:`kernels` gave for these operands."""
    return list(_CASLSTMStep.apply(ext, float(lambda_value), int(lambda_mode), x, h, c, lower_c,
                                   weight_ih, weight_hh, bias, lambda_vec, peephole))


class _CARNNStep(torch.autograd.Function):
    """``(x, h, weight_ih, bias_ih, context, weight_ch, weight_hh) -> h'``."""

    @staticmethod
    def forward(ctx: Any, ext: Any, x: Tensor, h: Tensor, weight_ih: Tensor,  # type: ignore[override]
                bias_ih: Tensor | None, context: Tensor | None, weight_ch: Tensor | None,
                weight_hh: Tensor | None) -> Tensor:  # fmt: skip
        saved = x.new_empty(x.shape[0], weight_ih.shape[0])
        h_new = ext.carnn_cell_step(x, h, weight_ih, bias_ih, context, weight_ch, weight_hh,
                                    saved)  # fmt: skip
        ctx.ext, ctx.has_bias = ext, bias_ih is not None
        ctx.save_for_backward(x, h, weight_ih, context, weight_ch, weight_hh, saved)
        ctx.set_materialize_grads(False)
        return h_new  # type: ignore[no-any-return]

    @staticmethod
    def backward(ctx: Any, grad_h: Tensor | None) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        x, h, w_ih, context, w_ch, w_hh, saved = ctx.saved_tensors
        with torch.no_grad():
            dx, dh, dw_ih, db, dctx, dw_ch, dw_hh = ctx.ext.carnn_step_backward(
                grad_h, x, h, w_ih, context, w_ch, w_hh, saved)
        out: tuple[Tensor | None, ...] = (
            dx, dh, dw_ih, db if ctx.has_bias else None,
            None if context is None else dctx, None if w_ch is None else dw_ch,
            None if w_hh is None else dw_hh)  # fmt: skip
        out = without_derivative(out, "carnn_step_backward", "CARNNCell")
        return (None, *out)


def carnn_step_train(
    ext: Any, x: Tensor, h: Tensor, weight_ih: Tensor, bias_ih: Tensor | None,
    context: Tensor | None, weight_ch: Tensor | None, weight_hh: Tensor | None,
) -> Tensor:  # fmt: skip
    """``h'`` of one CARNN step, as :func:`~ctrlrnn.ops.cell_steps.reference.carnn_cell_step_ref`
    with its arguments, one autograd node; ``ext`` is what :func:`kernels` gave for these
    operands."""
    return _CARNNStep.apply(ext, x, h, weight_ih, bias_ih, context, weight_ch,  # type: ignore[no-any-return]
                            weight_hh)


class _QRNNStep(torch.autograd.Function):
    """``(x, c, history, weight, bias) -> (h, c', history')``."""

    @staticmethod
    def forward(ctx: Any, ext: Any, mode: int, x: Tensor, c: Tensor,  # type: ignore[override]
                history: Tensor, weight: Tensor, bias: Tensor | None
                ) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
        saved = x.new_empty(x.shape[0], weight.shape[0])
        h, c_new, new_history = ext.qrnn_cell_step(x, c, history, weight, bias, mode, saved)
        ctx.ext, ctx.mode, ctx.has_bias = ext, mode, bias is not None
        ctx.save_for_backward(x, c, history, weight, c_new, saved)
        ctx.set_materialize_grads(False)
        return h, c_new, new_history

    @staticmethod
    def backward(ctx: Any, grad_h: Tensor | None, grad_c: Tensor | None,  # type: ignore[override]
                 grad_history: Tensor | None) -> tuple[Tensor | None, ...]:  # fmt: skip
        x, c, history, weight, c_new, saved = ctx.saved_tensors
        with torch.no_grad():
            dx, dc, dhist, dw, db = ctx.ext.qrnn_step_backward(
                grad_h, grad_c, grad_history, x, c, history, weight, ctx.mode, c_new, saved)
        out: tuple[Tensor | None, ...] = (dx, dc, dhist, dw, db if ctx.has_bias else None)
        out = without_derivative(out, "qrnn_step_backward", "QRNNCell")
        return (None, None, *out)


def qrnn_step_train(ext: Any, x: Tensor, c: Tensor, history: Tensor, weight: Tensor,
                    bias: Tensor | None, mode: int) -> list[Tensor]:
    """``[h, c', history']`` of one QRNN step, as
    :func:`~ctrlrnn.ops.cell_steps.reference.qrnn_cell_step_ref` with its arguments, one
    autograd node; ``ext`` is what :func:`kernels` gave for these operands."""
    return list(_QRNNStep.apply(ext, int(mode), x, c, history, weight, bias))
