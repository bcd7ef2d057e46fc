"""The nCARNN cell (CARNN paper eq 3)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ctrlrnn.ops.cells.reference import run

__all__ = ["ncarnn_sequence_ref", "ncarnn_step", "step"]


def ncarnn_step(x_t: Tensor, weight_hh: Tensor, context_proj: Tensor, h: Tensor) -> Tensor:
    """One nCARNN step, CARNN paper eq 3.

    ``x_t`` (B, 3H) holds ``(W^e_u e_m + b_u, W^e_f e_m + b_f, ebar_m = W_e e_m + b_e)``;
    ``context_proj`` (B, 2H) is ``(W^c_u c, W^c_f c)``; ``weight_hh`` (2H, H) is
    ``(W^h_u; W^h_f)``::

        g^u = sigmoid(W^c_u c + W^h_u h_{m-1} + W^e_u e_m + b_u)
        g^f = sigmoid(W^c_f c + W^h_f h_{m-1} + W^e_f e_m + b_f)
        ebar = W_e e_m + b_e
        h_m = g^u * (g^f * ebar) + (1 - g^u) * h_{m-1}
    """
    xu, xf, e_bar = x_t.chunk(3, dim=-1)
    cu, cf = context_proj.chunk(2, dim=-1)
    ru, rf = (h @ weight_hh.t()).chunk(2, dim=-1)
    gu = torch.sigmoid(cu + ru + xu)
    gf = torch.sigmoid(cf + rf + xf)
    return gu * (gf * e_bar) + (1 - gu) * h


def step(
    x: Sequence[Tensor | None], s: Sequence[Tensor], w: Sequence[Tensor | None]
) -> tuple[Tensor]:
    """The step in the form of :data:`ctrlrnn.ops.scan_export.Step`."""
    return (ncarnn_step(x[0], w[0], w[1], s[0]),)  # type: ignore[arg-type]


def ncarnn_sequence_ref(
    x_proj: Tensor,
    weight_hh: Tensor,
    context_proj: Tensor,
    h0: Tensor,
    lengths: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """nCARNN over a sequence (CARNN eq 3, :func:`ncarnn_step`) -> (h_seq, h_last)."""
    seqs, last = run(step, [h0], [x_proj], (weight_hh, context_proj), lengths)
    return (*seqs, *last)  # type: ignore[return-value]
