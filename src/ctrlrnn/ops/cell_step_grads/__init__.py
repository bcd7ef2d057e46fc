"""Fused cell steps that record a graph, on CPU: the forward is the step's op of
:mod:`ctrlrnn.ops.cell_steps` keeping what its backward reads, the backward one op of the
``scan`` extension (``cell_step_grads.cpp``), the pair one autograd node per step.

* :func:`rcrn_cell_step_train`: RCRN paper eq 1-16 with LSTM cells (``rcrn_cell_step`` with
  ``save``; ``rcrn_cell_step_backward``).

A short call that trains (a few tokens at batch 1 to 4) through the whole-sequence path pays a
fixed cost per call (the stacked recurrences, their projections and their autograd nodes) many
times its arithmetic; a step here is one node. :func:`kernels` says where a step may take it:
where :func:`ctrlrnn.ops.cell_steps.kernels` would but with grad enabled. The backward is a
kernel without a derivative of its own: a double backward raises the error of
:mod:`ctrlrnn.ops.double_backward`. Its readable twin is the autograd of the step's reference,
:func:`.reference.rcrn_cell_step_backward_ref`, which the tests hold it to.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from ctrlrnn.ops import cell_steps
from ctrlrnn.ops.cell_step_grads.reference import rcrn_cell_step_backward_ref
from ctrlrnn.ops.double_backward import without_derivative

__all__ = ["kernels", "rcrn_cell_step_backward_ref", "rcrn_cell_step_train"]


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
        if torch.is_grad_enabled():  # create_graph=True
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
