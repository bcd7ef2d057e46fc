"""The LSTM cell (CAS-LSTM paper eq 1-6; the cell of RCRN eq 1-6 and 10-14; torch.nn.LSTM's)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ctrlrnn.ops.cells.reference import run

__all__ = ["lstm_sequence_ref", "lstm_step", "step"]


def lstm_step(x_t: Tensor, weight_hh: Tensor, h: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
    """One LSTM step, CAS-LSTM paper eq 1-6 (the cell of RCRN eq 1-6 and 10-14).

    ``x_t`` (B, 4H) is ``W h^{l-1}_t + b`` for the gates in torch.nn.LSTM order (i, f, c~, o)::

        i = sigmoid(x_i + U_i h)        (1)
        f = sigmoid(x_f + U_f h)        (2)
        c~ = tanh(x_c + U_c h)          (3)
        o = sigmoid(x_o + U_o h)        (4)
        c' = i * c~ + f * c             (5)
        h' = o * tanh(c')               (6)
    """
    gi, gf, gc, go = (x_t + h @ weight_hh.t()).chunk(4, dim=-1)
    i = torch.sigmoid(gi)
    f = torch.sigmoid(gf)
    c_tilde = torch.tanh(gc)
    o = torch.sigmoid(go)
    c_new = i * c_tilde + f * c
    h_new = o * torch.tanh(c_new)
    return h_new, c_new


def step(
    x: Sequence[Tensor | None], s: Sequence[Tensor], w: Sequence[Tensor | None]
) -> tuple[Tensor, Tensor]:
    """The step in the form of :data:`ctrlrnn.ops.scan_export.Step`."""
    return lstm_step(x[0], w[0], s[0], s[1])  # type: ignore[arg-type]


def lstm_sequence_ref(
    x_proj: Tensor,
    weight_hh: Tensor,
    h0: Tensor,
    c0: Tensor,
    lengths: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """LSTM over a sequence (eq 1-6 of :func:`lstm_step`) -> (h_seq, c_seq, h_last, c_last)."""
    seqs, last = run(step, (h0, c0), [x_proj], [weight_hh], lengths)
    return (*seqs, *last)  # type: ignore[return-value]
