"""The CAS-LSTM cell of layers l > 1 on Triton (CAS-LSTM paper eq 7-13; eq 17-18 with peepholes).

The vertical forget gate g acts on the lower layer's cell, ``lambda`` arrives as the factors
``scale_f = 1 - lambda`` and ``scale_g = lambda``; their gradients and the peepholes' are per-row
sums written by the backward kernel (each program owns one row) and reduced over the batch
afterwards.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch
import triton
import triton.language as tl
from torch import Tensor

from ctrlrnn.ops.gpu._common import sigmoid, step_lanes, tanh


@triton.jit(do_not_specialize=["t"])
def step_forward(
    x_ptr,
    rec_ptr,
    low_ptr,
    sf_ptr,
    sg_ptr,
    pp_ptr,
    h_ptr,
    c_ptr,
    len_ptr,
    hseq_ptr,
    cseq_ptr,
    acts_ptr,
    t,
    T,
    H,
    PEEP: tl.constexpr,
    HAS_LEN: tl.constexpr,
    ACC: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """One CAS-LSTM step (eq 7-13, or eq 17 for g with ``PEEP``); grid ``(B, cdiv(H, BLOCK))``.

    ``x`` ``(B, T, 5H)`` holds the input projections of (i, f, c~, o, g); ``rec`` is
    ``h_{t-1} U^T``, ``(B, 5H)`` (``(B, 4H)`` with ``PEEP``: no ``U_g``); ``low`` ``(B, T, H)`` is
    the lower layer's cell ``c^{l-1}``; ``sf``, ``sg`` ``(H,)`` are ``1 - lambda`` and ``lambda``;
    ``pp`` ``(2, H)`` the peepholes ``(p_g1, p_g2)``. The state ``h``, ``c`` is updated in place;
    the activated gates (i, f, c~, o, g) are saved into ``acts`` ``(B, T, 5H)``.
    """
    pid_b, cols, cmask, zero, valid = step_lanes(len_ptr, t, H, HAS_LEN, BLOCK)
    if PEEP:
        rw = 4 * H
    else:
        rw = 5 * H
    xrow = (pid_b * T + t) * (5 * H) + cols
    rrow = pid_b * rw + cols
    srow = pid_b * H + cols
    orow = (pid_b * T + t) * H + cols
    gi = tl.load(x_ptr + xrow, mask=cmask, other=0.0).to(ACC)
    gf = tl.load(x_ptr + xrow + H, mask=cmask, other=0.0).to(ACC)
    gc = tl.load(x_ptr + xrow + 2 * H, mask=cmask, other=0.0).to(ACC)
    go = tl.load(x_ptr + xrow + 3 * H, mask=cmask, other=0.0).to(ACC)
    gg = tl.load(x_ptr + xrow + 4 * H, mask=cmask, other=0.0).to(ACC)
    gi += tl.load(rec_ptr + rrow, mask=cmask, other=0.0).to(ACC)
    gf += tl.load(rec_ptr + rrow + H, mask=cmask, other=0.0).to(ACC)
    gc += tl.load(rec_ptr + rrow + 2 * H, mask=cmask, other=0.0).to(ACC)
    go += tl.load(rec_ptr + rrow + 3 * H, mask=cmask, other=0.0).to(ACC)
    h_prev = tl.load(h_ptr + srow, mask=cmask, other=0.0).to(ACC)
    c_prev = tl.load(c_ptr + srow, mask=cmask, other=0.0).to(ACC)
    low = tl.load(low_ptr + orow, mask=cmask, other=0.0).to(ACC)
    if PEEP:  # eq 17: g = sig(W_g h^{l-1} + p_g1 c_{t-1} + p_g2 c^{l-1}_t + b_g)
        p1 = tl.load(pp_ptr + cols, mask=cmask, other=0.0).to(ACC)
        p2 = tl.load(pp_ptr + H + cols, mask=cmask, other=0.0).to(ACC)
        gg = gg + p1 * c_prev + p2 * low
    else:  # eq 9
        gg += tl.load(rec_ptr + rrow + 4 * H, mask=cmask, other=0.0).to(ACC)
    sf = tl.load(sf_ptr + cols, mask=cmask, other=0.0).to(ACC)
    sg = tl.load(sg_ptr + cols, mask=cmask, other=0.0).to(ACC)
    i = sigmoid(gi)  # eq 7
    f = sigmoid(gf)  # eq 8
    g = sigmoid(gg)  # eq 9 (17)
    ct = tanh(gc)  # eq 10
    o = sigmoid(go)  # eq 11
    c_new = i * ct + sf * f * c_prev + sg * g * low  # eq 12
    h_new = o * tanh(c_new)  # eq 13
    tl.store(c_ptr + srow, tl.where(valid, c_new, c_prev).to(c_ptr.dtype.element_ty), mask=cmask)
    tl.store(h_ptr + srow, tl.where(valid, h_new, h_prev).to(h_ptr.dtype.element_ty), mask=cmask)
    tl.store(cseq_ptr + orow, tl.where(valid, c_new, 0.0).to(cseq_ptr.dtype.element_ty), mask=cmask)
    tl.store(hseq_ptr + orow, tl.where(valid, h_new, 0.0).to(hseq_ptr.dtype.element_ty), mask=cmask)
    ty = acts_ptr.dtype.element_ty
    tl.store(acts_ptr + xrow, i.to(ty), mask=cmask)
    tl.store(acts_ptr + xrow + H, f.to(ty), mask=cmask)
    tl.store(acts_ptr + xrow + 2 * H, ct.to(ty), mask=cmask)
    tl.store(acts_ptr + xrow + 3 * H, o.to(ty), mask=cmask)
    tl.store(acts_ptr + xrow + 4 * H, g.to(ty), mask=cmask)


@triton.jit
def _load_acts(acts_ptr, arow, H, valid, ACC: tl.constexpr):
    """The step's saved activations ``i, f, c~, o, g`` (eq 7-11), in ``ACC``."""
    i = tl.load(acts_ptr + arow, mask=valid, other=0.0).to(ACC)
    f = tl.load(acts_ptr + arow + H, mask=valid, other=0.0).to(ACC)
    ct = tl.load(acts_ptr + arow + 2 * H, mask=valid, other=0.0).to(ACC)
    o = tl.load(acts_ptr + arow + 3 * H, mask=valid, other=0.0).to(ACC)
    g = tl.load(acts_ptr + arow + 4 * H, mask=valid, other=0.0).to(ACC)
    return i, f, ct, o, g


@triton.jit
def _load_cells(cseq_ptr, c0_ptr, orow, srow, zero, t, H, valid, cmask, ACC: tl.constexpr):
    """The cell ``c_t`` and the previous cell ``c_{t-1}`` (``c0`` at step 0)."""
    c = tl.load(cseq_ptr + orow, mask=valid, other=0.0).to(ACC)
    c_prev = tl.load(cseq_ptr + orow - H, mask=valid & ((zero + t) > 0), other=0.0).to(ACC)
    c0 = tl.load(c0_ptr + srow, mask=cmask, other=0.0).to(ACC)
    c_prev = tl.where((zero + t) > 0, c_prev, c0)
    return c, c_prev


@triton.jit
def _store_dgates(dg_ptr, arow, H, valid, cmask, dgi, dgf, dgc, dgo, dgg):
    """Store the gradients of the five pre-activations (zero past the length)."""
    ty = dg_ptr.dtype.element_ty
    tl.store(dg_ptr + arow, tl.where(valid, dgi, 0.0).to(ty), mask=cmask)
    tl.store(dg_ptr + arow + H, tl.where(valid, dgf, 0.0).to(ty), mask=cmask)
    tl.store(dg_ptr + arow + 2 * H, tl.where(valid, dgc, 0.0).to(ty), mask=cmask)
    tl.store(dg_ptr + arow + 3 * H, tl.where(valid, dgo, 0.0).to(ty), mask=cmask)
    tl.store(dg_ptr + arow + 4 * H, tl.where(valid, dgg, 0.0).to(ty), mask=cmask)


@triton.jit
def _accumulate_dpar(dpar_ptr, prow, H, valid, cmask, dc, f, g, c_prev, low, dgg,
                     PEEP: tl.constexpr, ACC: tl.constexpr):
    """Add this step's gradients of ``1 - lambda``, ``lambda`` (eq 12) and, with ``PEEP``, of
    the peepholes ``p_g1``, ``p_g2`` (eq 17) to the row's sums ``dpar[b]``."""
    pty = dpar_ptr.dtype.element_ty
    dsf = tl.load(dpar_ptr + prow, mask=cmask, other=0.0).to(ACC)
    dsg = tl.load(dpar_ptr + prow + H, mask=cmask, other=0.0).to(ACC)
    tl.store(dpar_ptr + prow, tl.where(valid, dsf + dc * f * c_prev, dsf).to(pty), mask=cmask)
    tl.store(dpar_ptr + prow + H, tl.where(valid, dsg + dc * g * low, dsg).to(pty), mask=cmask)
    if PEEP:
        dp1 = tl.load(dpar_ptr + prow + 2 * H, mask=cmask, other=0.0).to(ACC)
        dp2 = tl.load(dpar_ptr + prow + 3 * H, mask=cmask, other=0.0).to(ACC)
        tl.store(dpar_ptr + prow + 2 * H, tl.where(valid, dp1 + dgg * c_prev, dp1).to(pty),
                 mask=cmask)  # fmt: skip
        tl.store(dpar_ptr + prow + 3 * H, tl.where(valid, dp2 + dgg * low, dp2).to(pty),
                 mask=cmask)  # fmt: skip


@triton.jit(do_not_specialize=["t"])
def step_backward(
    gh_ptr,
    gc_ptr,
    acts_ptr,
    cseq_ptr,
    c0_ptr,
    low_ptr,
    sf_ptr,
    sg_ptr,
    pp_ptr,
    len_ptr,
    dh_ptr,
    dc_ptr,
    dg_ptr,
    dlow_ptr,
    dpar_ptr,
    t,
    T,
    H,
    PEEP: tl.constexpr,
    HAS_GH: tl.constexpr,
    HAS_GC: tl.constexpr,
    HAS_LEN: tl.constexpr,
    ACC: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Backward of one CAS-LSTM step (eq 7-13, 17); grid ``(B, cdiv(H, BLOCK))``.

    In: the running state gradients ``dh``, ``dc`` ``(B, H)``. Out: ``dgates[b, t]`` ``(5H)``
    (gradient of the pre-activations = of ``x_proj``; zero past the length), ``dlow[b, t]`` (the
    lower cell), ``dc <- dc_{t-1}``, ``dh <-`` the non-recurrent part of ``dh_{t-1}`` (the GEMM
    ``dgates_t U`` adds the rest), and the per-row sums ``dpar[b]`` ``(4, H)`` of the gradients
    of ``1 - lambda``, ``lambda``, ``p_g1``, ``p_g2`` (accumulated; each program owns its row).
    """
    pid_b, cols, cmask, zero, valid = step_lanes(len_ptr, t, H, HAS_LEN, BLOCK)
    srow = pid_b * H + cols
    orow = (pid_b * T + t) * H + cols
    arow = (pid_b * T + t) * (5 * H) + cols
    prow = pid_b * (4 * H) + cols
    dh_in = tl.load(dh_ptr + srow, mask=cmask, other=0.0).to(ACC)
    dc_in = tl.load(dc_ptr + srow, mask=cmask, other=0.0).to(ACC)
    dh = dh_in
    dc = dc_in
    if HAS_GH:
        dh += tl.load(gh_ptr + orow, mask=valid, other=0.0).to(ACC)
    if HAS_GC:
        dc += tl.load(gc_ptr + orow, mask=valid, other=0.0).to(ACC)
    i, f, ct, o, g = _load_acts(acts_ptr, arow, H, valid, ACC)
    c, c_prev = _load_cells(cseq_ptr, c0_ptr, orow, srow, zero, t, H, valid, cmask, ACC)
    low = tl.load(low_ptr + orow, mask=valid, other=0.0).to(ACC)
    sf = tl.load(sf_ptr + cols, mask=cmask, other=0.0).to(ACC)
    sg = tl.load(sg_ptr + cols, mask=cmask, other=0.0).to(ACC)
    tc = tanh(c)
    d_o = dh * tc  # eq 13
    dc = dc + dh * o * (1.0 - tc * tc)  # total gradient of c_t
    # eq 12: c_t = i c~ + sf f c_{t-1} + sg g c^{l-1}_t
    dgi = dc * ct * i * (1.0 - i)
    dgf = dc * sf * c_prev * f * (1.0 - f)
    dgc = dc * i * (1.0 - ct * ct)
    dgo = d_o * o * (1.0 - o)
    dgg = dc * sg * low * g * (1.0 - g)
    dlow = dc * sg * g
    dcp = dc * sf * f
    if PEEP:  # eq 17: g also reads c_{t-1} and c^{l-1}_t through the peepholes
        p1 = tl.load(pp_ptr + cols, mask=cmask, other=0.0).to(ACC)
        p2 = tl.load(pp_ptr + H + cols, mask=cmask, other=0.0).to(ACC)
        dlow += dgg * p2
        dcp += dgg * p1
    _store_dgates(dg_ptr, arow, H, valid, cmask, dgi, dgf, dgc, dgo, dgg)
    tl.store(dlow_ptr + orow, tl.where(valid, dlow, 0.0).to(dlow_ptr.dtype.element_ty), mask=cmask)
    _accumulate_dpar(dpar_ptr, prow, H, valid, cmask, dc, f, g, c_prev, low, dgg, PEEP, ACC)
    tl.store(dc_ptr + srow, tl.where(valid, dcp, dc_in).to(dc_ptr.dtype.element_ty), mask=cmask)
    tl.store(dh_ptr + srow, tl.where(valid, 0.0, dh_in).to(dh_ptr.dtype.element_ty), mask=cmask)


def _params(a: SimpleNamespace) -> dict[str, Any]:
    sf = a.scale_f.contiguous()
    pp = a.peephole.contiguous() if a.peephole is not None else None
    return {"low_ptr": a.lower_c.contiguous(), "sf_ptr": sf, "sg_ptr": a.scale_g.contiguous(),
            "pp_ptr": pp if pp is not None else sf, "PEEP": pp is not None}  # fmt: skip


def forward_operands(a: SimpleNamespace) -> dict[str, Any]:
    return _params(a)


def backward_operands(a: SimpleNamespace, blocks: int) -> tuple[dict[str, Any], Tensor]:
    batch, _, hidden = a.h_seq.shape
    dgates = torch.empty_like(a.acts)
    ops = {**_params(a), "cseq_ptr": a.c_seq, "c0_ptr": a.c0.contiguous(), "dg_ptr": dgates,
           "dlow_ptr": torch.empty_like(a.h_seq), "dpar_ptr": a.acts.new_zeros(batch, 4, hidden)}
    return ops, dgates


def backward_result(a: SimpleNamespace, ops: dict[str, Any], dw: Tensor,
                    running: list[Tensor]) -> tuple[Tensor, ...]:  # fmt: skip
    """``(dx_proj, dweight_hh, dlower_c, dscale_f, dscale_g, dpeephole, dh0, dc0)``;
    ``dpeephole`` is (2, H) zeros without peepholes (as the CPU kernel)."""
    sums = ops["dpar_ptr"].sum(0)
    dpp = sums[2:].clone() if ops["PEEP"] else a.h_seq.new_zeros(2, a.h_seq.shape[2])
    return (ops["dg_ptr"], dw, ops["dlow_ptr"], sums[0].clone(), sums[1].clone(), dpp,
            running[0], running[1])  # fmt: skip
