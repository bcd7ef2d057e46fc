"""The nCARNN cell: CARNN paper eq 3."""

from __future__ import annotations

from torch import Tensor

from ctrlrnn.ops.cells import checks
from ctrlrnn.ops.cells.ncarnn.reference import ncarnn_sequence_ref, ncarnn_step, step
from ctrlrnn.ops.cells.shell import Cell, define, plural, sequence

__all__ = ["ncarnn_sequence", "ncarnn_sequences", "ncarnn_sequence_ref", "ncarnn_step"]


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
    args, lengths = _arguments(x_proj, weight_hh, context_proj, h0, lengths=lengths)
    out = sequence(CELL, OP, args, lengths)
    return checks.uncast(out, x_proj.dtype)  # type: ignore[return-value]



def _arguments(
    x_proj: Tensor,
    weight_hh: Tensor,
    context_proj: Tensor,
    h0: Tensor | None = None,
    lengths: Tensor | None = None,
) -> tuple[tuple[Tensor | None, ...], Tensor | None]:
    """:func:`ncarnn_sequence`'s arguments checked and cast to the compute dtype: the op's
    inputs and the lengths."""
    batch, steps, hidden = checks.check_x_proj(x_proj, 3, weight_hh, 2)
    checks.check_tensor("weight_hh", weight_hh, weight_hh.shape, x_proj)
    checks.check_tensor("context_proj", context_proj, (batch, 2 * hidden), x_proj)
    h0 = checks.state("h0", h0, batch, hidden, x_proj)
    lengths = checks.checked_lengths(lengths, batch, steps, x_proj)
    dtype = checks.compute_dtype(x_proj)
    xp, w, ctx, h = checks.cast((x_proj, weight_hh, context_proj, h0), dtype)
    return (xp, w, ctx, h), lengths


ncarnn_sequences = plural(CELL, OP, _arguments, ncarnn_sequence)
