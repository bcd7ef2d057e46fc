"""The nCARNN cell: CARNN paper eq 3.

The cell's files: ``reference.py`` (the step from the paper and its loop over time),
``triton_kernels.py`` (its Triton step kernels, the op's CUDA kernel through
:mod:`ctrlrnn.ops.cells.triton_host`), ``ops/csrc/ncarnn.cpp`` (its CPU kernel, the extension
``cells``'s ``ncarnn_forward`` / ``ncarnn_backward``); here its description (:class:`Cell`),
its op ``ctrlrnn::ncarnn_cell_fwd`` and the public function.
"""

from __future__ import annotations

from torch import Tensor

from ctrlrnn.ops.cells.checks import (
    cast,
    check_tensor,
    check_x_proj,
    checked_lengths,
    compute_dtype,
    state,
    uncast,
)
from ctrlrnn.ops.cells.ncarnn.reference import ncarnn_sequence_ref, ncarnn_step, step
from ctrlrnn.ops.cells.shell import Cell, define, sequence

__all__ = ["ncarnn_sequence", "ncarnn_sequence_ref", "ncarnn_step"]


CELL = Cell(
    name="ncarnn",
    inputs=("x_proj", "weight_hh", "context_proj", "h0"),
    states=("h",),
    scanned=("x_proj",),
    saved=("x_proj", "weight_hh", "h0", "h_seq", "acts"),
    acts_width=lambda width, hidden: 2 * hidden,  # the gates g^u, g^f
    grad_shapes=lambda a: (
        a.x_proj.shape, a.weight_hh.shape, (a.h0.shape[0], 2 * a.h_seq.shape[2]), a.h0.shape,
    ),  # fmt: skip
    step=step,
    used_by="CARNN(variant='n')",
)
OP = define(CELL)


def ncarnn_sequence(
    x_proj: Tensor,
    weight_hh: Tensor,
    context_proj: Tensor,
    h0: Tensor | None = None,
    lengths: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Run an nCARNN (CARNN paper eq 3) over a batch-first sequence.

    ``g^u = sig(W^c_u c + W^h_u h_{m-1} + W^e_u e_m + b_u)``, likewise ``g^f``;
    ``h_m = g^u (g^f ebar_m) + (1 - g^u) h_{m-1}`` with ``ebar_m = W_e e_m + b_e``.

    Args:
        x_proj: (B, T, 3H) per-step projections of the input e_m, in the order
            (W^e_u e_m + b_u, W^e_f e_m + b_f, W_e e_m + b_e).
        weight_hh: (2H, H) the recurrent matrices (W^h_u; W^h_f).
        context_proj: (B, 2H) the context projection (W^c_u c, W^c_f c), computed once per
            sequence and broadcast over time inside the op.
        h0: (B, H) initial state; zeros when None.
        lengths: optional (B,) integer lengths in [0, T].

    Returns:
        ``(h_seq, h_last)``: (B, T, H) outputs (zero at padded steps) and the (B, H) final state.
    """
    batch, steps, hidden = check_x_proj(x_proj, 3, weight_hh, 2)
    check_tensor("weight_hh", weight_hh, weight_hh.shape, x_proj)
    check_tensor("context_proj", context_proj, (batch, 2 * hidden), x_proj)
    h0 = state("h0", h0, batch, hidden, x_proj)
    lengths = checked_lengths(lengths, batch, steps, x_proj)
    dtype = compute_dtype(x_proj)
    xp, w, ctx, h = cast((x_proj, weight_hh, context_proj, h0), dtype)
    out = sequence(CELL, OP, (xp, w, ctx, h), lengths)
    return uncast(out, x_proj.dtype)  # type: ignore[return-value]
