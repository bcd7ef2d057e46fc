"""The readable steps the fused cell-step ops (``cell_steps.cpp``) compute, from the papers'
equations; the tests hold each op to its reference here.

* :func:`qrnn_cell_step_ref`: QRNN paper eq 1-2 (the causal convolution over the window
  ``[history, x]`` as one product) and eq 3-5 (f-, fo- or ifo-pooling), one step.
* :func:`rcrn_cell_step_ref`: RCRN paper eq 1-6 (the two LSTM controllers), eq 10-14 (the
  listener's LSTM base) and eq 15-16 (the listener's cell and output), one step.
* :func:`carnn_cell_step_ref`: CARNN paper eq 3 (nCARNN), 5 (iCARNN) or 6 (sCARNN), one step.
* :func:`metagross_cell_step_ref`: METAGROSS paper eq 2-1..2-6 (gates from ``x_t``, section
  2.2, with a linear base and token depth gates, section 2.1), one step of the whole tree;
  :func:`metagross_printed_step_ref` the same as printed in section 2 (gates from ``h_{t-1}``).
* :func:`caslstm_cell_step_ref`: CAS-LSTM paper eq 1-6 (the first layer) or eq 7-13 (a layer
  above it; variant (iii)'s eq 17 with peepholes), one step.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from ctrlrnn.ops.cells.cas_lstm.reference import cas_lstm_step
from ctrlrnn.ops.cells.lstm.reference import lstm_step
from ctrlrnn.ops.cells.metagross_state.reference import metagross_state_step

__all__ = ["carnn_cell_step_ref", "caslstm_cell_step_ref", "metagross_cell_step_ref",
           "metagross_printed_step_ref", "qrnn_cell_step_ref", "rcrn_cell_step_ref"]


def qrnn_cell_step_ref(x: Tensor, c: Tensor, history: Tensor, weight: Tensor,
                       bias: Tensor | None, mode: int) -> tuple[Tensor, Tensor, Tensor]:
    """``(h_t, c_t, history')`` from ``x_t`` ``(B, D)``, ``c_{t-1}`` ``(B, H)`` and the window's
    earlier inputs ``history`` ``(B, k-1, D)``; ``weight`` ``(G*H, k*D)`` (taps oldest first,
    gate blocks ``[Z | F | O | I]``), ``mode`` 0 = f, 1 = fo, 2 = ifo."""
    window = torch.cat([history, x.unsqueeze(1)], dim=1)  # oldest first
    pre = F.linear(window.flatten(1), weight, bias)  # eq 1-2 (flatten: a batch of 0 too)
    H = c.shape[1]
    z = torch.tanh(pre[:, :H])
    f = torch.sigmoid(pre[:, H : 2 * H])
    if mode == 2:
        c_new = f * c + torch.sigmoid(pre[:, 3 * H : 4 * H]) * z  # eq 5
    else:
        c_new = f * c + (1 - f) * z  # eq 3, 4
    h = c_new if mode == 0 else torch.sigmoid(pre[:, 2 * H : 3 * H]) * c_new  # eq 4, 5
    return h, c_new, window[:, 1:].clone()


def _lstm(x: Tensor, h: Tensor, c: Tensor, w_ih: Tensor, w_hh: Tensor, b_ih: Tensor | None,
          b_hh: Tensor | None) -> tuple[Tensor, Tensor]:
    """One LSTM cell, gate rows ``[i | f | g | o]`` (RCRN eq 1-6, 10-14)."""
    pre = F.linear(x, w_ih, b_ih) + F.linear(h, w_hh, b_hh)
    i, f, g, o = pre.chunk(4, dim=1)
    c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c_new), c_new


def rcrn_cell_step_ref(x: Tensor, states: Sequence[Tensor], weights: Sequence[Tensor],
                       biases: Sequence[Tensor | None], sigmoid_gate: bool) -> list[Tensor]:
    """``[h4, h1, c1, h2, c2, h3, c3, c4]`` from ``x`` and ``states`` ``(h1, c1, h2, c2, h3, c3,
    c4)``; ``weights`` ``(weight_ih, weight_hh)`` and ``biases`` ``(bias_ih, bias_hh)`` of
    controller 1, controller 2 and the listener, in that order."""
    new: list[Tensor] = []
    for j in range(3):  # eq 1-6 (the controllers), 10-14 (the listener's base)
        new += _lstm(x, states[2 * j], states[2 * j + 1], weights[2 * j], weights[2 * j + 1],
                     biases[2 * j], biases[2 * j + 1])  # fmt: skip
    h1, h2, h3 = new[0], new[2], new[4]
    f = torch.sigmoid(h1)
    c4 = f * states[6] + (1 - f) * h3  # eq 15
    gate = torch.sigmoid(h2) if sigmoid_gate else h2
    return [gate * c4, *new, c4]  # eq 16


def carnn_cell_step_ref(x: Tensor, h: Tensor, weight_ih: Tensor, bias_ih: Tensor | None,
                        context: Tensor | None, weight_ch: Tensor | None,
                        weight_hh: Tensor | None) -> Tensor:
    """``h_m`` from ``e_m`` = ``x`` and ``h_{m-1}`` = ``h``: ``g_u, g_f = sigmoid(W^e e + b +
    W^c c + W^h h)`` (``W^c c`` without a context, ``W^h h`` for nCARNN only), ``h_m = g_u (g_f
    ebar) + (1 - g_u) h`` with ``ebar = W_e e + b_e``, or ``e`` itself for sCARNN (``weight_ih``
    of two gate blocks)."""
    H = h.shape[1]
    proj = F.linear(x, weight_ih, bias_ih)
    pre = proj[:, : 2 * H]
    if context is not None and weight_ch is not None:
        pre = pre + F.linear(context, weight_ch)
    if weight_hh is not None:
        pre = pre + F.linear(h, weight_hh)
    g_u, g_f = torch.sigmoid(pre).chunk(2, dim=1)
    e_bar = x if weight_ih.shape[0] == 2 * H else proj[:, 2 * H :]
    return g_u * (g_f * e_bar) + (1 - g_u) * h


def metagross_cell_step_ref(x: Tensor, state: Tensor, weight: Tensor, bias: Tensor | None,
                            depth_weight: Tensor | None, depth_bias: Tensor | None, depth: int,
                            h_form: bool, residual: bool) -> tuple[Tensor, Tensor]:
    """``(h_t, states_t)`` of the root and of every unit (heap order) from ``x_t`` ``(B, D)``
    and the units' states ``(B, N*H)``; ``weight`` ``(3NH, D)`` the base maps level-major
    (:mod:`ctrlrnn.ops.metagross_level.layout`), ``depth_weight`` ``(2I, D)`` the depth gates'
    rows ``[alpha | beta]``; the residual is ``x`` itself."""
    B, N = x.shape[0], 2**depth - 1
    H = state.shape[1] // N
    base = F.linear(x, weight, bias)  # section 2.2: F^F, F^O, F^Z of every unit
    gates = None if depth_weight is None else torch.sigmoid(F.linear(x, depth_weight, depth_bias))
    I = 2 ** (depth - 1) - 1
    res = x.unsqueeze(1) if residual else 0.0
    finals: dict[int, Tensor] = {}
    below: Tensor | None = None
    for level in range(depth, 0, -1):
        s, k = 2 ** (level - 1) - 1, 2 ** (level - 1)
        pf, po, pz = base[:, 3 * H * s : 3 * H * (s + k)].view(B, 3, k, H).unbind(1)
        if below is not None and gates is not None:
            mf, mo = below.view(B, k, 2, H).unbind(2)
            alpha = gates[:, s : s + k].unsqueeze(-1)
            beta = gates[:, I + s : I + s + k].unsqueeze(-1)
            pf = alpha * mf + (1 - alpha) * pf  # eq 2-1
            po = beta * mo + (1 - beta) * po  # eq 2-2
        f, o, z = torch.sigmoid(pf), torch.sigmoid(po), torch.tanh(pz)  # eq 2-1..2-3
        prev = state[:, s * H : (s + k) * H].view(B, k, H)
        if h_form:  # eq 2-4..2-6
            carried = o * (1 - f) * prev + o * f * z + res
            below = carried
        else:
            carried = (1 - f) * prev + f * z
            below = o * carried + res
        finals[level] = carried.reshape(B, k * H)
    assert below is not None
    return below[:, 0], torch.cat([finals[n] for n in range(1, depth + 1)], dim=1)


def metagross_printed_step_ref(x: Tensor, h: Tensor, weight: Tensor, bias: Tensor | None,
                               weight_hh: Tensor, depth_weight: Tensor | None,
                               depth_bias: Tensor | None, depth: int,
                               residual: bool) -> Tensor:
    """``h_t``, the root's output, from ``x_t`` ``(B, D)`` and the root's ``h_{t-1}``
    ``(B, H)``, the whole carried state as printed in section 2 (every base map reads
    ``x_t`` and ``h_{t-1}``: ``W x_t + b + U h_{t-1}``, ``weight_hh`` ``(3NH, H)`` the ``U``
    in the rows of ``weight``); the depth gates and the residual as in
    :func:`metagross_cell_step_ref`. The tree itself is
    :func:`~ctrlrnn.ops.cells.metagross_state.reference.metagross_state_step`."""
    I = 2 ** (depth - 1) - 1
    if depth_weight is None:
        alpha = beta = x.new_zeros(x.shape[0], 0)
    else:
        gates = torch.sigmoid(F.linear(x, depth_weight, depth_bias))
        alpha, beta = gates[:, :I], gates[:, I:]
    return metagross_state_step(F.linear(x, weight, bias), weight_hh, alpha, beta,
                                x if residual else None, h)


def caslstm_cell_step_ref(x: Tensor, h: Tensor, c: Tensor, lower_c: Tensor | None,
                          weight_ih: Tensor, weight_hh: Tensor, bias: Tensor | None,
                          lambda_vec: Tensor | None, lambda_value: float, lambda_mode: int,
                          peephole: Tensor | None) -> list[Tensor]:
    """``[h_t, c_t]`` from ``x_t`` ``(B, D)``, ``h_{t-1}``, ``c_{t-1}`` and the lower layer's
    cell ``lower_c`` (None: the first layer, eq 1-6); ``lambda_mode`` 0 is eq 18's plain sum, 1
    takes ``lambda_value`` and 2 ``lambda_vec`` ``(H,)`` as eq 12's lambda."""
    x_proj = F.linear(x, weight_ih, bias)
    if lower_c is None:
        return list(lstm_step(x_proj, weight_hh, h, c))  # eq 1-6
    H = h.shape[1]
    if lambda_mode == 0:
        scale_f = scale_g = x.new_ones(H)
    else:
        lam = lambda_vec if lambda_mode == 2 else x.new_full((H,), lambda_value)
        assert lam is not None
        scale_f, scale_g = 1 - lam, lam
    return list(cas_lstm_step(x_proj, weight_hh, lower_c, h, c, scale_f, scale_g,
                              peephole))  # eq 7-13, 17
