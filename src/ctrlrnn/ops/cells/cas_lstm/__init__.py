"""The CAS-LSTM cell of layers l > 1: CAS-LSTM paper eq 7-13 with lambda, and the peephole
variant eq 17-18.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ctrlrnn.ops.cells import checks
from ctrlrnn.ops.cells.cas_lstm.reference import cas_lstm_sequence_ref, cas_lstm_step, step
from ctrlrnn.ops.cells.shell import Cell, define, plural, sequence

__all__ = ["cas_lstm_sequence", "cas_lstm_sequences", "cas_lstm_sequence_ref", "cas_lstm_step"]


CELL = Cell(
    name="cas_lstm",
    inputs=("x_proj", "weight_hh", "lower_c", "scale_f", "scale_g", "peephole?", "h0", "c0"),
    states=("h", "c"),
    scanned=("x_proj", "lower_c"),
    saved=("weight_hh", "lower_c", "scale_f", "scale_g", "peephole", "h0", "c0", "h_seq",
           "c_seq", "acts"),  # fmt: skip
    acts_width=lambda width, hidden: width,  # the gates i, f, c~, o, g
    # dpeephole is (2, H) zeros when there is no peephole
    grad_shapes=lambda a: (
        a.acts.shape, a.weight_hh.shape, a.lower_c.shape, a.scale_f.shape, a.scale_g.shape,
        (2, a.h_seq.shape[2]), a.h0.shape, a.c0.shape,
    ),  # fmt: skip
    step=step,
    used_by="CASLSTM",
)
OP = define(CELL)


def cas_lstm_sequence(
    x_proj: Tensor,
    weight_hh: Tensor,
    lower_c: Tensor,
    h0: Tensor | None = None,
    c0: Tensor | None = None,
    lengths: Tensor | None = None,
    lambda_: float | Tensor | None = 0.5,
    peephole: Tensor | tuple[Tensor, Tensor] | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Run a CAS-LSTM layer l > 1 (CAS-LSTM paper eq 7-13, section 3.2) over a sequence.

    ``c_t = i c~ + (1 - lambda) f c_{t-1} + lambda g c^{l-1}_t`` (eq 12), ``h_t = o tanh(c_t)``,
    with the vertical forget gate ``g = sig(W_g h^{l-1}_t + U_g h_{t-1} + b_g)`` (eq 9).

    Args:
        x_proj: (B, T, 5H) input projections ``h^{l-1}_t @ W^T + b`` for the gates in the order
            (i, f, c~, o, g): the first 4H as torch.nn.LSTM, the vertical gate g last.
        weight_hh: (5H, H) recurrent matrix (U_i, U_f, U_c, U_o, U_g); (4H, H) without U_g in
            the peephole variant.
        lower_c: (B, T, H) the lower layer's cell states c^{l-1}_t (d_l = d_{l-1}).
        h0, c0: (B, H) initial states; zeros when None.
        lengths: optional (B,) integer lengths in [0, T].
        lambda_: the mixing weight of eq 12: a float constant (paper default 0.5), a tensor of
            shape (H,) or () (e.g. ``sigmoid`` of a parameter for the trainable variant; gradients
            flow to it), or None for the plain sum ``f c_{t-1} + g c^{l-1}_t`` (variant (ii),
            and eq 18).
        peephole: variant (iii): ``(p_g1, p_g2)`` or a stacked (2, H) tensor; then
            ``g = sig(x_g + p_g1 c_{t-1} + p_g2 c^{l-1}_t)`` (eq 17) with no U_g, so ``weight_hh``
            is (4H, H). Use ``lambda_=None`` to get eq 18 exactly.

    Returns:
        ``(h_seq, c_seq, h_last, c_last)`` as in :func:`lstm_sequence`.
    """
    args, lengths = _arguments(
        x_proj, weight_hh, lower_c, h0, c0, lambda_=lambda_, peephole=peephole, lengths=lengths
    )
    out = sequence(CELL, OP, args, lengths)
    return checks.uncast(out, x_proj.dtype)  # type: ignore[return-value]



def _arguments(
    x_proj: Tensor,
    weight_hh: Tensor,
    lower_c: Tensor,
    h0: Tensor | None = None,
    c0: Tensor | None = None,
    lengths: Tensor | None = None,
    lambda_: float | Tensor | None = 0.5,
    peephole: Tensor | tuple[Tensor, Tensor] | None = None,
) -> tuple[tuple[Tensor | None, ...], Tensor | None]:
    """:func:`cas_lstm_sequence`'s arguments checked and cast to the compute dtype: the op's
    inputs and the lengths."""
    gates_h = 4 if peephole is not None else 5
    batch, steps, hidden = checks.check_x_proj(x_proj, 5, weight_hh, gates_h)
    checks.check_tensor("weight_hh", weight_hh, weight_hh.shape, x_proj)
    checks.check_tensor("lower_c", lower_c, (batch, steps, hidden), x_proj)
    h0 = checks.state("h0", h0, batch, hidden, x_proj)
    c0 = checks.state("c0", c0, batch, hidden, x_proj)
    lengths = checks.checked_lengths(lengths, batch, steps, x_proj)
    dtype = checks.compute_dtype(x_proj)

    if lambda_ is None:
        scale_g = x_proj.new_ones(hidden, dtype=dtype)
        scale_f = scale_g
    elif isinstance(lambda_, Tensor):
        if lambda_.dim() > 1 or (lambda_.dim() == 1 and lambda_.shape[0] != hidden):
            raise ValueError(f"lambda_: expected shape () or ({hidden},), got {lambda_.shape}")
        if lambda_.device != x_proj.device:
            raise ValueError(f"lambda_: expected device {x_proj.device}, got {lambda_.device}")
        scale_g = lambda_.to(dtype).expand(hidden)
        scale_f = 1 - scale_g
    else:
        scale_g = x_proj.new_full((hidden,), float(lambda_), dtype=dtype)
        scale_f = 1 - scale_g

    pp: Tensor | None = None
    if peephole is not None:
        pp = torch.stack(tuple(peephole)) if isinstance(peephole, (tuple, list)) else peephole
        checks.check_tensor("peephole", pp, (2, hidden), x_proj)

    xp, w, low, p, h, c = checks.cast((x_proj, weight_hh, lower_c, pp, h0, c0), dtype)
    return (xp, w, low, scale_f, scale_g, p, h, c), lengths


cas_lstm_sequences = plural(CELL, OP, _arguments, cas_lstm_sequence)
