"""The LSTM cell: CAS-LSTM paper eq 1-6 (RCRN eq 1-6, 10-14); equals torch.nn.LSTM."""

from __future__ import annotations

from torch import Tensor

from ctrlrnn.ops.cells import checks
from ctrlrnn.ops.cells.lstm.reference import lstm_sequence_ref, lstm_step, step
from ctrlrnn.ops.cells.shell import Cell, define, plural, sequence

__all__ = ["lstm_sequence", "lstm_sequences", "lstm_sequence_ref", "lstm_step"]


CELL = Cell(
    name="lstm",
    inputs=("x_proj", "weight_hh", "h0", "c0"),
    states=("h", "c"),
    scanned=("x_proj",),
    saved=("weight_hh", "h0", "c0", "h_seq", "c_seq", "acts"),
    acts_width=lambda width, hidden: width,  # the activated gates i, f, c~, o
    grad_shapes=lambda a: (a.acts.shape, a.weight_hh.shape, a.h0.shape, a.c0.shape),
    step=step,
    used_by="RCRN, CASLSTM (layer 1), METAGROSS's LSTM base",
)
OP = define(CELL)


def lstm_sequence(
    x_proj: Tensor,
    weight_hh: Tensor,
    h0: Tensor | None = None,
    c0: Tensor | None = None,
    lengths: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Run an LSTM (CAS-LSTM paper eq 1-6; torch.nn.LSTM's cell) over a batch-first sequence.

    Args:
        x_proj: (B, T, 4H) input projections ``x_t @ W_ih^T + b_ih + b_hh`` for all steps, gates
            in torch.nn.LSTM order (i, f, g=c~, o).
        weight_hh: (4H, H) recurrent matrix U (torch.nn.LSTM's ``weight_hh_l0``).
        h0, c0: (B, H) initial states; zeros when None.
        lengths: optional (B,) integer lengths in [0, T] (see module docstring).

    Returns:
        ``(h_seq, c_seq, h_last, c_last)``: (B, T, H) hidden and cell sequences (zero at padded
        steps) and the (B, H) final states.
    """
    args, lengths = _arguments(x_proj, weight_hh, h0, c0, lengths=lengths)
    out = sequence(CELL, OP, args, lengths)
    return checks.uncast(out, x_proj.dtype)  # type: ignore[return-value]



def _arguments(
    x_proj: Tensor,
    weight_hh: Tensor,
    h0: Tensor | None = None,
    c0: Tensor | None = None,
    lengths: Tensor | None = None,
) -> tuple[tuple[Tensor | None, ...], Tensor | None]:
    """:func:`lstm_sequence`'s arguments checked and cast to the compute dtype: the op's
    inputs and the lengths."""
    batch, steps, hidden = checks.check_x_proj(x_proj, 4, weight_hh, 4)
    checks.check_tensor("weight_hh", weight_hh, weight_hh.shape, x_proj)
    h0 = checks.state("h0", h0, batch, hidden, x_proj)
    c0 = checks.state("c0", c0, batch, hidden, x_proj)
    lengths = checks.checked_lengths(lengths, batch, steps, x_proj)
    dtype = checks.compute_dtype(x_proj)
    xp, w, h, c = checks.cast((x_proj, weight_hh, h0, c0), dtype)
    return (xp, w, h, c), lengths


lstm_sequences = plural(CELL, OP, _arguments, lstm_sequence)
