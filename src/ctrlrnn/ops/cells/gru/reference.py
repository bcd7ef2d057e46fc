"""The GRU cell in torch.nn.GRU's formulation (gate order r, z, n)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ctrlrnn.ops.cells.reference import run

__all__ = ["gru_sequence_ref", "gru_step", "step"]


def gru_step(x_t: Tensor, weight_hh: Tensor, bias_hh: Tensor, h: Tensor) -> Tensor:
    """One GRU step in the torch.nn.GRU formulation (gate order r, z, n).

    ``x_t`` (B, 3H) is ``W_ih x + b_ih``; the recurrent bias ``b_hn`` stays inside the reset
    product, exactly as in torch.nn.GRU::

        r = sigmoid(x_r + U_r h + b_hr)
        z = sigmoid(x_z + U_z h + b_hz)
        n = tanh(x_n + r * (U_n h + b_hn))
        h' = (1 - z) * n + z * h
    """
    xr, xz, xn = x_t.chunk(3, dim=-1)
    hr, hz, hn = (h @ weight_hh.t() + bias_hh).chunk(3, dim=-1)
    r = torch.sigmoid(xr + hr)
    z = torch.sigmoid(xz + hz)
    n = torch.tanh(xn + r * hn)
    return (1 - z) * n + z * h


def step(
    x: Sequence[Tensor | None], s: Sequence[Tensor], w: Sequence[Tensor | None]
) -> tuple[Tensor]:
    """The step in the form of :data:`ctrlrnn.ops.scan_export.Step`."""
    return (gru_step(x[0], w[0], w[1], s[0]),)  # type: ignore[arg-type]


def gru_sequence_ref(
    x_proj: Tensor,
    weight_hh: Tensor,
    bias_hh: Tensor,
    h0: Tensor,
    lengths: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """GRU over a sequence (torch.nn.GRU formulation of :func:`gru_step`) -> (h_seq, h_last)."""
    seqs, last = run(step, [h0], [x_proj], (weight_hh, bias_hh), lengths)
    return (*seqs, *last)  # type: ignore[return-value]
