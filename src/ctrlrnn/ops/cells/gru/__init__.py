"""The GRU cell in torch.nn.GRU's formulation; equals torch.nn.GRU."""

from __future__ import annotations

from torch import Tensor

from ctrlrnn.ops.cells import checks
from ctrlrnn.ops.cells.gru.reference import gru_sequence_ref, gru_step, step
from ctrlrnn.ops.cells.shell import Cell, define, plural, sequence

__all__ = ["gru_sequence", "gru_sequences", "gru_sequence_ref", "gru_step"]


CELL = Cell(
    name="gru",
    inputs=("x_proj", "weight_hh", "bias_hh", "h0"),
    states=("h",),
    scanned=("x_proj",),
    saved=("weight_hh", "h0", "h_seq", "acts"),
    acts_width=lambda width, hidden: 4 * hidden,  # r, z, n and U_n h + b_hn
    grad_shapes=lambda a: (
        (*a.h_seq.shape[:2], 3 * a.h_seq.shape[2]), a.weight_hh.shape, (a.weight_hh.shape[0],),
        a.h0.shape,
    ),  # fmt: skip
    step=step,
    used_by="RCRN(cell='gru'), METAGROSS's GRU base",
)
OP = define(CELL)


def gru_sequence(
    x_proj: Tensor,
    weight_hh: Tensor,
    bias_hh: Tensor | None = None,
    h0: Tensor | None = None,
    lengths: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Run a GRU in torch.nn.GRU's formulation over a batch-first sequence.

    ``r = sig(x_r + U_r h + b_hr)``, ``z = sig(x_z + U_z h + b_hz)``,
    ``n = tanh(x_n + r * (U_n h + b_hn))``, ``h' = (1 - z) n + z h``.

    Args:
        x_proj: (B, T, 3H) input projections ``x_t @ W_ih^T + b_ih`` (gate order r, z, n),
            *without* the recurrent bias.
        weight_hh: (3H, H) recurrent matrix (torch.nn.GRU's ``weight_hh_l0``).
        bias_hh: (3H,) recurrent bias (torch.nn.GRU's ``bias_hh_l0``); zeros when None. Its
            n-part must stay inside the reset product, hence a separate argument.
        h0: (B, H) initial state; zeros when None.
        lengths: optional (B,) integer lengths in [0, T].

    Returns:
        ``(h_seq, h_last)``: (B, T, H) outputs (zero at padded steps) and the (B, H) final state.
    """
    args, lengths = _arguments(x_proj, weight_hh, bias_hh, h0, lengths=lengths)
    out = sequence(CELL, OP, args, lengths)
    return checks.uncast(out, x_proj.dtype)  # type: ignore[return-value]



def _arguments(
    x_proj: Tensor,
    weight_hh: Tensor,
    bias_hh: Tensor | None = None,
    h0: Tensor | None = None,
    lengths: Tensor | None = None,
) -> tuple[tuple[Tensor | None, ...], Tensor | None]:
    """:func:`gru_sequence`'s arguments checked and cast to the compute dtype: the op's
    inputs and the lengths."""
    batch, steps, hidden = checks.check_x_proj(x_proj, 3, weight_hh, 3)
    checks.check_tensor("weight_hh", weight_hh, weight_hh.shape, x_proj)
    if bias_hh is None:
        bias_hh = x_proj.new_zeros(3 * hidden)
    checks.check_tensor("bias_hh", bias_hh, (3 * hidden,), x_proj)
    h0 = checks.state("h0", h0, batch, hidden, x_proj)
    lengths = checks.checked_lengths(lengths, batch, steps, x_proj)
    dtype = checks.compute_dtype(x_proj)
    xp, w, b, h = checks.cast((x_proj, weight_hh, bias_hh, h0), dtype)
    return (xp, w, b, h), lengths


gru_sequences = plural(CELL, OP, _arguments, gru_sequence)
