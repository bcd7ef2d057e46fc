"""The GRU cell on Triton (torch.nn.GRU's formulation, gates r, z, n; ``b_hn`` inside the reset
product).
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
    """One GRU step; ``rec`` ``(B, 3H)`` is ``h_{t-1} U^T + b_hh``; ``h`` updated in place.

    ``r = sig(x_r + rec_r)``, ``z = sig(x_z + rec_z)``, ``n = tanh(x_n + r rec_n)``,
    ``h' = (1 - z) n + z h``. Saves ``(r, z, n, rec_n)`` into ``acts`` ``(B, T, 4H)``.
    """
    pid_b, cols, cmask, zero, valid = step_lanes(len_ptr, t, H, HAS_LEN, BLOCK)
    xrow = (pid_b * T + t) * (3 * H) + cols
    rrow = pid_b * (3 * H) + cols
    srow = pid_b * H + cols
    hn = tl.load(rec_ptr + rrow + 2 * H, mask=cmask, other=0.0).to(ACC)
    r = sigmoid(tl.load(x_ptr + xrow, mask=cmask, other=0.0).to(ACC)
                + tl.load(rec_ptr + rrow, mask=cmask, other=0.0).to(ACC))  # fmt: skip
    z = sigmoid(tl.load(x_ptr + xrow + H, mask=cmask, other=0.0).to(ACC)
                + tl.load(rec_ptr + rrow + H, mask=cmask, other=0.0).to(ACC))  # fmt: skip
    n = tanh(tl.load(x_ptr + xrow + 2 * H, mask=cmask, other=0.0).to(ACC) + r * hn)
    h_prev = tl.load(h_ptr + srow, mask=cmask, other=0.0).to(ACC)
    h_new = (1.0 - z) * n + z * h_prev
    tl.store(h_ptr + srow, tl.where(valid, h_new, h_prev).to(h_ptr.dtype.element_ty), mask=cmask)
    orow = (pid_b * T + t) * H + cols
    tl.store(hseq_ptr + orow, tl.where(valid, h_new, 0.0).to(hseq_ptr.dtype.element_ty), mask=cmask)
    arow = (pid_b * T + t) * (4 * H) + cols
    ty = acts_ptr.dtype.element_ty
    tl.store(acts_ptr + arow, r.to(ty), mask=cmask)
    tl.store(acts_ptr + arow + H, z.to(ty), mask=cmask)
    tl.store(acts_ptr + arow + 2 * H, n.to(ty), mask=cmask)
    tl.store(acts_ptr + arow + 3 * H, hn.to(ty), mask=cmask)


@triton.jit(do_not_specialize=["t"])
def step_backward(
    gh_ptr,
    acts_ptr,
    hseq_ptr,
    h0_ptr,
    len_ptr,
    dh_ptr,
    dx_ptr,
    drec_ptr,
    t,
    T,
    H,
    HAS_GH: tl.constexpr,
    HAS_LEN: tl.constexpr,
    ACC: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Backward of one GRU step: ``dx[b, t]`` ``(3H)`` for the input projections, ``drec[b, t]``
    ``(3H)`` for ``h_{t-1} U^T + b_hh``, and ``dh <-`` the direct part ``z dh`` of ``dh_{t-1}``
    (the incoming gradient itself past the length)."""
    pid_b, cols, cmask, zero, valid = step_lanes(len_ptr, t, H, HAS_LEN, BLOCK)
    srow = pid_b * H + cols
    orow = (pid_b * T + t) * H + cols
    arow = (pid_b * T + t) * (4 * H) + cols
    drow = (pid_b * T + t) * (3 * H) + cols
    dh_in = tl.load(dh_ptr + srow, mask=cmask, other=0.0).to(ACC)
    dh = dh_in
    if HAS_GH:
        dh += tl.load(gh_ptr + orow, mask=valid, other=0.0).to(ACC)
    r = tl.load(acts_ptr + arow, mask=valid, other=0.0).to(ACC)
    z = tl.load(acts_ptr + arow + H, mask=valid, other=0.0).to(ACC)
    n = tl.load(acts_ptr + arow + 2 * H, mask=valid, other=0.0).to(ACC)
    hn = tl.load(acts_ptr + arow + 3 * H, mask=valid, other=0.0).to(ACC)
    h_prev = tl.load(hseq_ptr + orow - H, mask=valid & ((zero + t) > 0), other=0.0).to(ACC)
    h0 = tl.load(h0_ptr + srow, mask=cmask, other=0.0).to(ACC)
    h_prev = tl.where((zero + t) > 0, h_prev, h0)
    dn = dh * (1.0 - z) * (1.0 - n * n)  # through tanh
    dz = dh * (h_prev - n) * z * (1.0 - z)
    dr = dn * hn * r * (1.0 - r)
    ty = dx_ptr.dtype.element_ty
    tl.store(dx_ptr + drow, tl.where(valid, dr, 0.0).to(ty), mask=cmask)
    tl.store(dx_ptr + drow + H, tl.where(valid, dz, 0.0).to(ty), mask=cmask)
    tl.store(dx_ptr + drow + 2 * H, tl.where(valid, dn, 0.0).to(ty), mask=cmask)
    tl.store(drec_ptr + drow, tl.where(valid, dr, 0.0).to(ty), mask=cmask)
    tl.store(drec_ptr + drow + H, tl.where(valid, dz, 0.0).to(ty), mask=cmask)
    tl.store(drec_ptr + drow + 2 * H, tl.where(valid, dn * r, 0.0).to(ty), mask=cmask)
    tl.store(dh_ptr + srow, tl.where(valid, dh * z, dh_in).to(dh_ptr.dtype.element_ty), mask=cmask)


#: The step's GEMM adds the recurrent bias: ``rec = h_{t-1} U^T + b_hh``.
RECURRENT_BIAS = "bias_hh"


#: The step kernels read nothing per recurrence but U (and the recurrent bias): a stack of
#: recurrences runs as one batch of rows (:mod:`ctrlrnn.ops.cells.triton_host`).
ROWS_ONLY = True


def forward_operands(a: SimpleNamespace) -> dict[str, Any]:
    return {}


def backward_operands(a: SimpleNamespace, blocks: int) -> tuple[dict[str, Any], Tensor]:
    batch, steps, hidden = a.h_seq.shape
    dx = a.h_seq.new_zeros(batch, steps, 3 * hidden)
    drec = torch.empty_like(dx)
    ops = {"hseq_ptr": a.h_seq, "h0_ptr": a.h0.contiguous(), "dx_ptr": dx, "drec_ptr": drec}
    return ops, drec


def backward_result(a: SimpleNamespace, ops: dict[str, Any], dw: Tensor,
                    running: list[Tensor]) -> tuple[Tensor, ...]:  # fmt: skip
    """``(dx_proj, dweight_hh, dbias_hh, dh0)``: ``dbias_hh`` sums the GEMM's gradient (per
    recurrence, for the rows of ``a.recurrences`` recurrences)."""
    drec = ops["drec_ptr"]
    R = getattr(a, "recurrences", None)
    if R is None:
        return ops["dx_ptr"], dw, drec.reshape(-1, drec.shape[-1]).sum(0), running[0]
    return ops["dx_ptr"], dw, drec.reshape(R, -1, drec.shape[-1]).sum(1), running[0]
