"""The CAS-LSTM cell of layers l > 1 (CAS-LSTM paper eq 7-13, and variant (iii), eq 17-18)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ctrlrnn.ops.cells.reference import run

__all__ = ["cas_lstm_sequence_ref", "cas_lstm_step", "step"]


def cas_lstm_step(
    x_t: Tensor,
    weight_hh: Tensor,
    lower_c_t: Tensor,
    h: Tensor,
    c: Tensor,
    scale_f: Tensor,
    scale_g: Tensor,
    peephole: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """One CAS-LSTM step for a layer l > 1, CAS-LSTM paper eq 7-13 (and variant (iii), eq 17-18).

    ``x_t`` (B, 5H) is ``W h^{l-1}_t + b`` in gate order (i, f, c~, o, g); ``lower_c_t`` (B, H) is
    the lower layer's cell ``c^{l-1}_t``; ``scale_f`` and ``scale_g`` (H) are ``1 - lambda``
    and ``lambda`` (both ones for the plain sum of variant (ii) and eq 18)::

        i = sigmoid(x_i + U_i h)                                  (7)
        f = sigmoid(x_f + U_f h)                                  (8)
        g = sigmoid(x_g + U_g h)                                  (9)
        c~ = tanh(x_c + U_c h)                                    (10)
        o = sigmoid(x_o + U_o h)                                  (11)
        c' = i * c~ + (1 - lambda) * f * c + lambda * g * c^{l-1}  (12)
        h' = o * tanh(c')                                         (13)

    With ``peephole = stack(p_g1, p_g2)`` (2, H), ``weight_hh`` is (4H, H) (no ``U_g``) and the
    vertical gate is eq 17: ``g = sigmoid(x_g + p_g1 * c + p_g2 * c^{l-1})``.
    """
    hidden = h.shape[-1]
    rec = h @ weight_hh.t()
    xi, xf, xc, xo, xg = x_t.chunk(5, dim=-1)
    ri, rf, rc, ro = (rec[..., k * hidden : (k + 1) * hidden] for k in range(4))
    i = torch.sigmoid(xi + ri)
    f = torch.sigmoid(xf + rf)
    c_tilde = torch.tanh(xc + rc)
    o = torch.sigmoid(xo + ro)
    if peephole is None:
        g = torch.sigmoid(xg + rec[..., 4 * hidden :])
    else:
        g = torch.sigmoid(xg + peephole[0] * c + peephole[1] * lower_c_t)
    c_new = i * c_tilde + scale_f * f * c + scale_g * g * lower_c_t
    h_new = o * torch.tanh(c_new)
    return h_new, c_new


def step(
    x: Sequence[Tensor | None], s: Sequence[Tensor], w: Sequence[Tensor | None]
) -> tuple[Tensor, Tensor]:
    """The step in the form of :data:`ctrlrnn.ops.scan_export.Step`."""
    return cas_lstm_step(x[0], w[0], x[1], s[0], s[1], w[1], w[2], w[3])  # type: ignore[arg-type]


def cas_lstm_sequence_ref(
    x_proj: Tensor,
    weight_hh: Tensor,
    lower_c: Tensor,
    h0: Tensor,
    c0: Tensor,
    scale_f: Tensor,
    scale_g: Tensor,
    peephole: Tensor | None = None,
    lengths: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """CAS-LSTM layer l > 1 over a sequence (eq 7-13, 17-18 of :func:`cas_lstm_step`).

    ``lower_c`` (B, T, H) is the lower layer's cell sequence. Returns
    (h_seq, c_seq, h_last, c_last).
    """
    consts = (weight_hh, scale_f, scale_g, peephole)
    seqs, last = run(step, (h0, c0), (x_proj, lower_c), consts, lengths)
    return (*seqs, *last)  # type: ignore[return-value]
