"""Readable reference implementations of the fused gated cells.

Each cell is one step function written straight from its paper's equations plus a plain Python
loop over time (:func:`_run`) differentiated by torch autograd. They define what the compiled
kernels in ``csrc/cells.cpp`` must compute and serve as the fallback on devices without a
compiled path.

Conventions shared with :mod:`ctrlrnn.ops.fused_cells`:

* Everything that does not depend on the recurrent state is precomputed by the caller for all
  steps at once: ``x_proj`` (B, T, G*H) holds the input projections including their biases.
* ``weight_hh`` (G_h*H, H) is the recurrent matrix U, so the recurrent term is
  ``h_{t-1} @ weight_hh.T``.
* ``lengths`` (B,) int64, optional: for ``t >= lengths[b]`` row ``b`` keeps its state and
  emits zeros.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

__all__ = [
    "cas_lstm_sequence_ref",
    "cas_lstm_step",
    "gru_sequence_ref",
    "gru_step",
    "lstm_sequence_ref",
    "lstm_step",
    "metagross_state_sequence_ref",
    "metagross_state_step",
    "ncarnn_sequence_ref",
    "ncarnn_step",
]


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
    the lower layer's cell ``c^{l-1}_t``; ``scale_f`` and ``scale_g`` (H,) are ``1 - lambda``
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


def metagross_maps(node: int) -> tuple[int, int, int]:
    """Offsets, in units of ``H``, of unit ``node``'s base maps ``F^F, F^O, F^Z`` in the
    level-major layout (``ctrlrnn.nn.metagross.base_index``): level ``n`` holds units ``s ..
    2s`` (``s = 2^(n-1) - 1``) and its block is ``[F of its s+1 units | O | Z]``."""
    start = (1 << (node + 1).bit_length() - 1) - 1
    width, j = start + 1, node - start
    return 3 * start + j, 3 * start + width + j, 3 * start + 2 * width + j


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
    (level-major, :func:`metagross_maps`), biases included; ``weight_hh`` (3NH, H) their
    recurrent part, so ``F^g_k(x_t, h_{t-1}) = x_t[g, k] + (h_{t-1} U^T)[g, k]``; ``alpha_t``,
    ``beta_t`` (B, I) the depth gates of the ``I = (N-1)/2`` internal units; ``res_t`` (B, H)
    the residual term or None. The unit ``Metagross_n(x_t, h_{t-1})`` of heap node ``k``::

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
        mf, mo, mz = metagross_maps(node)
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


def _run(
    step: Callable[[int, Sequence[Tensor]], Sequence[Tensor]],
    states: Sequence[Tensor],
    steps: int,
    lengths: Tensor | None,
) -> tuple[list[Tensor], list[Tensor]]:
    """Loop ``states = step(t, states)`` over time with the variable-length rule.

    Returns the per-state output sequences (each (B, T, H), zero where ``t >= lengths[b]``) and
    the final states (the state at each row's last valid step).
    """
    states = list(states)
    outs: list[list[Tensor]] = [[] for _ in states]
    for t in range(steps):
        new = list(step(t, states))
        if lengths is None:
            states = new
            for k, s in enumerate(new):
                outs[k].append(s)
        else:
            valid = (t < lengths).to(states[0].device).unsqueeze(-1)
            states = [torch.where(valid, n, s) for n, s in zip(new, states, strict=True)]
            for k, n in enumerate(new):
                outs[k].append(torch.where(valid, n, torch.zeros_like(n)))
    if steps == 0:
        seqs = [s.new_zeros(s.shape[0], 0, s.shape[-1]) for s in states]
    else:
        seqs = [torch.stack(o, dim=1) for o in outs]
    return seqs, states


def lstm_sequence_ref(
    x_proj: Tensor,
    weight_hh: Tensor,
    h0: Tensor,
    c0: Tensor,
    lengths: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """LSTM over a sequence (eq 1-6 of :func:`lstm_step`) -> (h_seq, c_seq, h_last, c_last)."""
    (h_seq, c_seq), (h, c) = _run(
        lambda t, s: lstm_step(x_proj[:, t], weight_hh, s[0], s[1]),
        (h0, c0),
        x_proj.shape[1],
        lengths,
    )
    return h_seq, c_seq, h, c


def gru_sequence_ref(
    x_proj: Tensor,
    weight_hh: Tensor,
    bias_hh: Tensor,
    h0: Tensor,
    lengths: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """GRU over a sequence (torch.nn.GRU formulation of :func:`gru_step`) -> (h_seq, h_last)."""
    (h_seq,), (h,) = _run(
        lambda t, s: (gru_step(x_proj[:, t], weight_hh, bias_hh, s[0]),),
        (h0,),
        x_proj.shape[1],
        lengths,
    )
    return h_seq, h


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
    (h_seq, c_seq), (h, c) = _run(
        lambda t, s: cas_lstm_step(
            x_proj[:, t], weight_hh, lower_c[:, t], s[0], s[1], scale_f, scale_g, peephole
        ),
        (h0, c0),
        x_proj.shape[1],
        lengths,
    )
    return h_seq, c_seq, h, c


def ncarnn_sequence_ref(
    x_proj: Tensor,
    weight_hh: Tensor,
    context_proj: Tensor,
    h0: Tensor,
    lengths: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """nCARNN over a sequence (CARNN eq 3, :func:`ncarnn_step`) -> (h_seq, h_last)."""
    (h_seq,), (h,) = _run(
        lambda t, s: (ncarnn_step(x_proj[:, t], weight_hh, context_proj, s[0]),),
        (h0,),
        x_proj.shape[1],
        lengths,
    )
    return h_seq, h


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
    (h_seq,), (h,) = _run(
        lambda t, s: (
            metagross_state_step(
                x_proj[:, t], weight_hh, alpha[:, t], beta[:, t],
                None if res is None else res[:, t], s[0],
            ),
        ),
        (h0,),
        x_proj.shape[1],
        lengths,
    )  # fmt: skip
    return h_seq, h
