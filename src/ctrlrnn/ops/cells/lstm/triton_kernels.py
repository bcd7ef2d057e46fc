"""The LSTM cell on Triton (CAS-LSTM paper eq 1-6; torch.nn.LSTM's cell, gates i, f, c~, o)."""

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
    h_ptr,
    c_ptr,
    len_ptr,
    hseq_ptr,
    cseq_ptr,
    acts_ptr,
    t,
    T,
    H,
    HAS_LEN: tl.constexpr,
    ACC: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """One LSTM step (eq 1-6) for a block of channels of one row; grid ``(B, cdiv(H, BLOCK))``.

    ``rec`` ``(B, 4H)`` is ``h_{t-1} U^T``; the state ``h``, ``c`` ``(B, H)`` is updated in place.
    """
    pid_b, cols, cmask, zero, valid = step_lanes(len_ptr, t, H, HAS_LEN, BLOCK)
    xrow = (pid_b * T + t) * (4 * H) + cols
    rrow = pid_b * (4 * H) + cols
    srow = pid_b * H + cols
    gi = tl.load(x_ptr + xrow, mask=cmask, other=0.0).to(ACC)
    gf = tl.load(x_ptr + xrow + H, mask=cmask, other=0.0).to(ACC)
    gg = tl.load(x_ptr + xrow + 2 * H, mask=cmask, other=0.0).to(ACC)
    go = tl.load(x_ptr + xrow + 3 * H, mask=cmask, other=0.0).to(ACC)
    gi += tl.load(rec_ptr + rrow, mask=cmask, other=0.0).to(ACC)
    gf += tl.load(rec_ptr + rrow + H, mask=cmask, other=0.0).to(ACC)
    gg += tl.load(rec_ptr + rrow + 2 * H, mask=cmask, other=0.0).to(ACC)
    go += tl.load(rec_ptr + rrow + 3 * H, mask=cmask, other=0.0).to(ACC)
    i = sigmoid(gi)  # eq 1
    f = sigmoid(gf)  # eq 2
    g = tanh(gg)  # eq 3
    o = sigmoid(go)  # eq 4
    h_prev = tl.load(h_ptr + srow, mask=cmask, other=0.0).to(ACC)
    c_prev = tl.load(c_ptr + srow, mask=cmask, other=0.0).to(ACC)
    c_new = i * g + f * c_prev  # eq 5
    h_new = o * tanh(c_new)  # eq 6
    tl.store(c_ptr + srow, tl.where(valid, c_new, c_prev).to(c_ptr.dtype.element_ty), mask=cmask)
    tl.store(h_ptr + srow, tl.where(valid, h_new, h_prev).to(h_ptr.dtype.element_ty), mask=cmask)
    orow = (pid_b * T + t) * H + cols
    tl.store(cseq_ptr + orow, tl.where(valid, c_new, 0.0).to(cseq_ptr.dtype.element_ty), mask=cmask)
    tl.store(hseq_ptr + orow, tl.where(valid, h_new, 0.0).to(hseq_ptr.dtype.element_ty), mask=cmask)
    ty = acts_ptr.dtype.element_ty
    tl.store(acts_ptr + xrow, i.to(ty), mask=cmask)
    tl.store(acts_ptr + xrow + H, f.to(ty), mask=cmask)
    tl.store(acts_ptr + xrow + 2 * H, g.to(ty), mask=cmask)
    tl.store(acts_ptr + xrow + 3 * H, o.to(ty), mask=cmask)


@triton.jit(do_not_specialize=["t"])
def step_backward(
    gh_ptr,
    gc_ptr,
    acts_ptr,
    cseq_ptr,
    c0_ptr,
    len_ptr,
    dh_ptr,
    dc_ptr,
    dg_ptr,
    t,
    T,
    H,
    HAS_GH: tl.constexpr,
    HAS_GC: tl.constexpr,
    HAS_LEN: tl.constexpr,
    ACC: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Backward of one LSTM step; grid ``(B, cdiv(H, BLOCK))``.

    In: the running state gradients ``dh``, ``dc`` ``(B, H)`` (gradients flowing into ``h_t``,
    ``c_t`` from later steps). Out: ``dgates[b, t]`` (pre-activations, zero past the length),
    ``dc <- dc_{t-1}`` and ``dh <-`` the non-recurrent part of ``dh_{t-1}`` (zero for valid
    steps: the recurrent part ``dgates_t @ U`` is added by a GEMM afterwards).
    """
    pid_b, cols, cmask, zero, valid = step_lanes(len_ptr, t, H, HAS_LEN, BLOCK)
    srow = pid_b * H + cols
    orow = (pid_b * T + t) * H + cols
    arow = (pid_b * T + t) * (4 * H) + cols
    dh_in = tl.load(dh_ptr + srow, mask=cmask, other=0.0).to(ACC)
    dc_in = tl.load(dc_ptr + srow, mask=cmask, other=0.0).to(ACC)
    dh = dh_in
    dc = dc_in
    if HAS_GH:
        dh += tl.load(gh_ptr + orow, mask=valid, other=0.0).to(ACC)
    if HAS_GC:
        dc += tl.load(gc_ptr + orow, mask=valid, other=0.0).to(ACC)
    i = tl.load(acts_ptr + arow, mask=valid, other=0.0).to(ACC)
    f = tl.load(acts_ptr + arow + H, mask=valid, other=0.0).to(ACC)
    g = tl.load(acts_ptr + arow + 2 * H, mask=valid, other=0.0).to(ACC)
    o = tl.load(acts_ptr + arow + 3 * H, mask=valid, other=0.0).to(ACC)
    c = tl.load(cseq_ptr + orow, mask=valid, other=0.0).to(ACC)
    c_prev = tl.load(cseq_ptr + orow - H, mask=valid & ((zero + t) > 0), other=0.0).to(ACC)
    c0 = tl.load(c0_ptr + srow, mask=cmask, other=0.0).to(ACC)
    c_prev = tl.where((zero + t) > 0, c_prev, c0)
    tc = tanh(c)
    d_o = dh * tc
    dc = dc + dh * o * (1.0 - tc * tc)
    ty = dg_ptr.dtype.element_ty
    tl.store(dg_ptr + arow, tl.where(valid, dc * g * i * (1.0 - i), 0.0).to(ty), mask=cmask)
    tl.store(dg_ptr + arow + H, tl.where(valid, dc * c_prev * f * (1.0 - f), 0.0).to(ty),
             mask=cmask)  # fmt: skip
    tl.store(dg_ptr + arow + 2 * H, tl.where(valid, dc * i * (1.0 - g * g), 0.0).to(ty),
             mask=cmask)  # fmt: skip
    tl.store(dg_ptr + arow + 3 * H, tl.where(valid, d_o * o * (1.0 - o), 0.0).to(ty), mask=cmask)
    tl.store(dc_ptr + srow, tl.where(valid, dc * f, dc_in).to(dc_ptr.dtype.element_ty), mask=cmask)
    tl.store(dh_ptr + srow, tl.where(valid, 0.0, dh_in).to(dh_ptr.dtype.element_ty), mask=cmask)


#: The step kernels read nothing per recurrence but U (and the recurrent bias): a stack of
#: recurrences runs as one batch of rows (:mod:`ctrlrnn.ops.cells.triton_host`).
ROWS_ONLY = True


def forward_operands(a: SimpleNamespace) -> dict[str, Any]:
    return {}


def backward_operands(a: SimpleNamespace, blocks: int) -> tuple[dict[str, Any], Tensor]:
    dgates = torch.empty_like(a.acts)
    return {"cseq_ptr": a.c_seq, "c0_ptr": a.c0.contiguous(), "dg_ptr": dgates}, dgates


def backward_result(a: SimpleNamespace, ops: dict[str, Any], dw: Tensor,
                    running: list[Tensor]) -> tuple[Tensor, ...]:  # fmt: skip
    """``(dx_proj, dweight_hh, dh0, dc0)``."""
    return ops["dg_ptr"], dw, running[0], running[1]
