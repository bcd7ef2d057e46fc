"""The METAGROSS unit as printed (METAGROSS paper section 2: gates that read ``h_{t-1}``)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ctrlrnn.ops.cells.reference import run
from ctrlrnn.ops.metagross_level.layout import base_offsets

__all__ = ["metagross_state_sequence_ref", "metagross_state_step", "step"]


def metagross_state_step(
    x_t: Tensor,
    weight_hh: Tensor,
    alpha_t: Tensor,
    beta_t: Tensor,
    res_t: Tensor | None,
    h: Tensor,
) -> Tensor:
    """One step of the METAGROSS unit as printed in section 2 (gates that read ``h_{t-1}``).

    ``x_t`` (B, 3NH) holds the input part of every base map of the tree's ``N = 2^L - 1`` units
    (level-major, :func:`~ctrlrnn.ops.metagross_level.layout.base_offsets`), biases included;
    ``weight_hh`` (3NH, H) their recurrent part, so
    ``F^g_k(x_t, h_{t-1}) = x_t[g, k] + (h_{t-1} U^T)[g, k]``; ``alpha_t``, ``beta_t`` (B, I)
    the depth gates of the ``I = (N-1)/2`` internal units; ``res_t`` (B, H) the residual term
    or None. The unit ``Metagross_n(x_t, h_{t-1})`` of heap node ``k``::

        f = sig(alpha F-child(x_t, h_{t-1}) + (1 - alpha) F^F_k(x_t, h_{t-1}))   (2-1)
        o = sig(beta  O-child(x_t, h_{t-1}) + (1 - beta)  F^O_k(x_t, h_{t-1}))   (2-2)
        z = tanh(F^Z_k(x_t, h_{t-1}))                                           (2-3)
        c = (1 - f) h_{t-1} + f z                                               (2-4)
        h = o c (+ r_t)                                                         (2-5, 2-6)

    with the children (heap nodes ``2k+1``, ``2k+2``) called on the same ``(x_t, h_{t-1})``
    and, at the maximum depth, ``f = sig(F^F_k)``, ``o = sig(F^O_k)``. The mix is written
    ``F + alpha (child - F)``, the printed ``alpha child + (1 - alpha) F`` (the form the kernels
    use, so special values agree). Returns the root's output: the new state.
    """
    hidden = h.shape[-1]
    pre = x_t + h @ weight_hh.t()
    nodes = pre.shape[-1] // (3 * hidden)
    internal = (nodes - 1) // 2

    def block(offset: int) -> Tensor:
        return pre[:, offset * hidden : (offset + 1) * hidden]

    def unit(node: int) -> Tensor:
        mf, mo, mz = base_offsets(node)
        pf, po, z = block(mf), block(mo), torch.tanh(block(mz))
        if node < internal:
            a, b = alpha_t[:, node : node + 1], beta_t[:, node : node + 1]
            f = torch.sigmoid(pf + a * (unit(2 * node + 1) - pf))
            o = torch.sigmoid(po + b * (unit(2 * node + 2) - po))
        else:
            f, o = torch.sigmoid(pf), torch.sigmoid(po)
        c = (1 - f) * h + f * z
        out = o * c
        return out if res_t is None else out + res_t

    return unit(0)


def step(
    x: Sequence[Tensor | None], s: Sequence[Tensor], w: Sequence[Tensor | None]
) -> tuple[Tensor]:
    """The step in the form of :data:`ctrlrnn.ops.scan_export.Step`."""
    return (metagross_state_step(x[0], w[0], x[1], x[2], x[3], s[0]),)  # type: ignore[arg-type]


def metagross_state_sequence_ref(
    x_proj: Tensor,
    weight_hh: Tensor,
    alpha: Tensor,
    beta: Tensor,
    res: Tensor | None,
    h0: Tensor,
    lengths: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """METAGROSS as printed over a sequence (:func:`metagross_state_step`) -> (h_seq, h_last).

    ``x_proj`` (B, T, 3NH), ``alpha``, ``beta`` (B, T, I), ``res`` (B, T, H) or None.
    """
    seqs, last = run(step, [h0], (x_proj, alpha, beta, res), [weight_hh], lengths)
    return (*seqs, *last)  # type: ignore[return-value]
