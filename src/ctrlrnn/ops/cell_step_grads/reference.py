"""What the fused steps' backward ops (``cell_step_grads.cpp``) compute: the gradients of the
readable steps of :mod:`ctrlrnn.ops.cell_steps.reference` by plain autograd, in the op's
argument order. The tests hold each op to its reference here.

* :func:`rcrn_cell_step_backward_ref`: the gradients of RCRN paper eq 1-16 (LSTM cells), one
  step (:func:`~ctrlrnn.ops.cell_steps.reference.rcrn_cell_step_ref`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ctrlrnn.ops.cell_steps.reference import rcrn_cell_step_ref

__all__ = ["rcrn_cell_step_backward_ref"]


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
        pairs = [(o, g) for o, g in zip(out, grads, strict=True) if g is not None]
        wanted = leaves + bias[::2]  # each cell's bias_ih (bias_hh's gradient is the same)
        got = (torch.autograd.grad([o for o, _ in pairs], wanted, [g for _, g in pairs],
                                   allow_unused=True)
               if pairs else [None] * len(wanted))  # fmt: skip
    return [torch.zeros_like(t) if g is None else g for t, g in zip(wanted, got, strict=True)]
