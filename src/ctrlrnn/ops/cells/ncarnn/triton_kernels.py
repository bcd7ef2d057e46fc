"""The nCARNN cell on Triton (CARNN paper eq 3).

The context projection is one ``(B, 2H)`` tensor shared by all steps; its gradient is summed
over time in the backward kernel.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch
import triton
import triton.language as tl
from torch import Tensor

from ctrlrnn.ops.gpu._common import sigmoid, step_lanes


@triton.jit(do_not_specialize=["t"])
def step_forward(
    x_ptr,
    rec_ptr,
    ctx_ptr,
    h_ptr,
    len_ptr,
    hseq_ptr,
    acts_ptr,
    t,
    T,
    H,
    HAS_LEN: tl.constexpr,
    ACC: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """One nCARNN step (CARNN eq 3); grid ``(B, cdiv(H, BLOCK))``.

    ``x`` ``(B, T, 3H)`` holds ``(W^e_u e_m + b_u, W^e_f e_m + b_f, ebar_m)``; ``rec`` ``(B, 2H)``
    is ``h_{m-1} (W^h_u; W^h_f)^T``; ``ctx`` ``(B, 2H)`` is ``(W^c_u c, W^c_f c)``, the same for
    every step. ``h`` is updated in place; the gates ``(g^u, g^f)`` are saved into ``acts``
    ``(B, T, 2H)``.
    """
    pid_b, cols, cmask, zero, valid = step_lanes(len_ptr, t, H, HAS_LEN, BLOCK)
    xrow = (pid_b * T + t) * (3 * H) + cols
    rrow = pid_b * (2 * H) + cols
    srow = pid_b * H + cols
    # g^u = sig(W^c_u c + W^h_u h_{m-1} + W^e_u e_m + b_u), likewise g^f
    pre_u = tl.load(ctx_ptr + rrow, mask=cmask, other=0.0).to(ACC)
    pre_u += tl.load(rec_ptr + rrow, mask=cmask, other=0.0).to(ACC)
    pre_u += tl.load(x_ptr + xrow, mask=cmask, other=0.0).to(ACC)
    pre_f = tl.load(ctx_ptr + rrow + H, mask=cmask, other=0.0).to(ACC)
    pre_f += tl.load(rec_ptr + rrow + H, mask=cmask, other=0.0).to(ACC)
    pre_f += tl.load(x_ptr + xrow + H, mask=cmask, other=0.0).to(ACC)
    gu = sigmoid(pre_u)
    gf = sigmoid(pre_f)
    e_bar = tl.load(x_ptr + xrow + 2 * H, mask=cmask, other=0.0).to(ACC)
    h_prev = tl.load(h_ptr + srow, mask=cmask, other=0.0).to(ACC)
    h_new = gu * (gf * e_bar) + (1.0 - gu) * h_prev  # eq 3
    tl.store(h_ptr + srow, tl.where(valid, h_new, h_prev).to(h_ptr.dtype.element_ty), mask=cmask)
    orow = (pid_b * T + t) * H + cols
    tl.store(hseq_ptr + orow, tl.where(valid, h_new, 0.0).to(hseq_ptr.dtype.element_ty), mask=cmask)
    arow = (pid_b * T + t) * (2 * H) + cols
    ty = acts_ptr.dtype.element_ty
    tl.store(acts_ptr + arow, gu.to(ty), mask=cmask)
    tl.store(acts_ptr + arow + H, gf.to(ty), mask=cmask)


@triton.jit(do_not_specialize=["t"])
def step_backward(
    gh_ptr,
    x_ptr,
    acts_ptr,
    hseq_ptr,
    h0_ptr,
    len_ptr,
    dh_ptr,
    dx_ptr,
    dctx_ptr,
    t,
    T,
    H,
    HAS_GH: tl.constexpr,
    HAS_LEN: tl.constexpr,
    ACC: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Backward of one nCARNN step (CARNN eq 3); grid ``(B, cdiv(H, BLOCK))``.

    Out: ``dx[b, t]`` ``(3H)`` (zero past the length; its first 2H are also the gradient of the
    recurrent term, multiplied by ``U`` in a GEMM afterwards), ``dctx[b] +=`` the gate part
    (the context projection is shared by all steps), and ``dh <-`` the direct part
    ``(1 - g^u) dh`` of ``dh_{m-1}`` (the incoming gradient itself past the length).
    """
    pid_b, cols, cmask, zero, valid = step_lanes(len_ptr, t, H, HAS_LEN, BLOCK)
    srow = pid_b * H + cols
    orow = (pid_b * T + t) * H + cols
    xrow = (pid_b * T + t) * (3 * H) + cols
    arow = (pid_b * T + t) * (2 * H) + cols
    crow = pid_b * (2 * H) + cols
    dh_in = tl.load(dh_ptr + srow, mask=cmask, other=0.0).to(ACC)
    dh = dh_in
    if HAS_GH:
        dh += tl.load(gh_ptr + orow, mask=valid, other=0.0).to(ACC)
    gu = tl.load(acts_ptr + arow, mask=valid, other=0.0).to(ACC)
    gf = tl.load(acts_ptr + arow + H, mask=valid, other=0.0).to(ACC)
    e_bar = tl.load(x_ptr + xrow + 2 * H, mask=valid, other=0.0).to(ACC)
    h_prev = tl.load(hseq_ptr + orow - H, mask=valid & ((zero + t) > 0), other=0.0).to(ACC)
    h0 = tl.load(h0_ptr + srow, mask=cmask, other=0.0).to(ACC)
    h_prev = tl.where((zero + t) > 0, h_prev, h0)
    # h_m = g^u (g^f ebar) + (1 - g^u) h_{m-1}
    dgu = (dh * (gf * e_bar) - dh * h_prev) * gu * (1.0 - gu)
    dgf = dh * gu * e_bar * gf * (1.0 - gf)
    de = dh * gu * gf
    ty = dx_ptr.dtype.element_ty
    tl.store(dx_ptr + xrow, tl.where(valid, dgu, 0.0).to(ty), mask=cmask)
    tl.store(dx_ptr + xrow + H, tl.where(valid, dgf, 0.0).to(ty), mask=cmask)
    tl.store(dx_ptr + xrow + 2 * H, tl.where(valid, de, 0.0).to(ty), mask=cmask)
    cty = dctx_ptr.dtype.element_ty
    du = tl.load(dctx_ptr + crow, mask=cmask, other=0.0).to(ACC)
    df = tl.load(dctx_ptr + crow + H, mask=cmask, other=0.0).to(ACC)
    tl.store(dctx_ptr + crow, tl.where(valid, du + dgu, du).to(cty), mask=cmask)
    tl.store(dctx_ptr + crow + H, tl.where(valid, df + dgf, df).to(cty), mask=cmask)
    tl.store(dh_ptr + srow, tl.where(valid, dh * (1.0 - gu), dh_in).to(dh_ptr.dtype.element_ty),
             mask=cmask)  # fmt: skip


#: The step kernels read nothing per recurrence but U (and the recurrent bias): a stack of
#: recurrences runs as one batch of rows (:mod:`ctrlrnn.ops.cells.triton_host`).
ROWS_ONLY = True


def forward_operands(a: SimpleNamespace) -> dict[str, Any]:
    return {"ctx_ptr": a.context_proj.contiguous()}


def backward_operands(a: SimpleNamespace, blocks: int) -> tuple[dict[str, Any], Tensor]:
    batch, _, hidden = a.h_seq.shape
    dx = torch.empty_like(a.x_proj, memory_format=torch.contiguous_format)
    ops = {"x_ptr": a.x_proj.contiguous(), "hseq_ptr": a.h_seq, "h0_ptr": a.h0.contiguous(),
           "dx_ptr": dx, "dctx_ptr": a.h_seq.new_zeros(batch, 2 * hidden)}  # fmt: skip
    return ops, dx


def backward_result(a: SimpleNamespace, ops: dict[str, Any], dw: Tensor,
                    running: list[Tensor]) -> tuple[Tensor, ...]:  # fmt: skip
    """``(dx_proj, dweight_hh, dcontext_proj, dh0)``."""
    return ops["dx_ptr"], dw, ops["dctx_ptr"], running[0]
