"""GPU fused gated cells: LSTM and GRU, Haste's recipe on Triton.

Per time step: one GEMM ``h_{t-1} @ U^T`` through torch (cuBLAS on CUDA), then one Triton kernel
for all the pointwise work of the step (gate activations, cell update, length masking, saving
the activated gates for backward). Backward through time is written the same way: per step one
Triton kernel turns the incoming state gradients into the gradient of the gate pre-activations,
then one GEMM ``dgates_t @ U`` adds the recurrent part of ``dh_{t-1}``; the weight gradient is a
single GEMM over all steps at the end (``dU = dgates^T [h0; h_1..h_{T-1}]``). The step index
is a runtime argument the kernels are not specialised on, so one compiled kernel serves all
steps.

Public functions have the signatures and results of the references in
:mod:`ctrlrnn.ops.cells_ref` and are differentiable (``torch.library`` custom ops with
registered autograd, so they stay opaque under ``torch.compile``):

* :func:`lstm_sequence` - CAS-LSTM paper eq 1-6, torch.nn.LSTM's cell (gate order i, f, c~, o);
* :func:`gru_sequence` - torch.nn.GRU's formulation (gate order r, z, n, ``b_hn`` inside the
  reset product).

Variable lengths follow the references: for ``t >= lengths[b]`` row ``b`` keeps its state and
its outputs are zero; gradients do not depend on the padding. fp16/bf16 inputs are computed in
fp32 and the outputs cast back (as :mod:`ctrlrnn.ops.fused_cells` does).
"""

# No `from __future__ import annotations`: torch 2.4's custom_op reads the annotations of the
# functions it registers as written, and cannot parse them as strings.

from typing import Any

import torch
import triton
import triton.language as tl
from torch import Tensor

from ctrlrnn.ops.double_backward import forbid_double_backward
from ctrlrnn.ops.gpu._common import acc_dtype, sigmoid, tanh

__all__ = ["gru_sequence", "lstm_sequence"]

_HALF = (torch.float16, torch.bfloat16)


def _block(hidden: int) -> tuple[int, int]:
    """Channel block and warps of the per-step kernels (not autotuned: they update state in
    place, so a benchmark re-run would corrupt it)."""
    blk = max(16, min(256, triton.next_power_of_2(max(hidden, 1))))
    return blk, max(1, blk // 64)


# ------------------------------------------------------------------------------------------------
# LSTM
# ------------------------------------------------------------------------------------------------


@triton.jit(do_not_specialize=["t"])
def _lstm_step_fwd_kernel(
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
    pid_b = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    cmask = cols < H
    zero = tl.zeros([BLOCK], tl.int64)
    if HAS_LEN:
        valid = cmask & ((zero + t) < tl.load(len_ptr + pid_b))
    else:
        valid = cmask
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
def _lstm_step_bwd_kernel(
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
    pid_b = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    cmask = cols < H
    zero = tl.zeros([BLOCK], tl.int64)
    if HAS_LEN:
        valid = cmask & ((zero + t) < tl.load(len_ptr + pid_b))
    else:
        valid = cmask
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


def _prev_states(h0: Tensor, h_seq: Tensor) -> Tensor:
    """``[h0, h_1, ..., h_{T-1}]`` ``(B, T, H)``: the state each step read (valid steps only)."""
    return torch.cat([h0.unsqueeze(1), h_seq[:, :-1]], dim=1)


def _lengths(lengths: Tensor | None, like: Tensor) -> Tensor | None:
    if lengths is None:
        return None
    return lengths.to(device=like.device, dtype=torch.int64).contiguous()


@torch.library.custom_op("ctrlrnn::gpu_lstm_fwd", mutates_args=())
def _lstm_fwd(
    x_proj: Tensor, weight_hh: Tensor, h0: Tensor, c0: Tensor, lengths: Tensor | None
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """LSTM forward -> (h_seq, c_seq, h_last, c_last, saved activated gates i, f, c~, o)."""
    batch, steps, width = x_proj.shape
    hidden = weight_hh.shape[1]
    x = x_proj.contiguous()
    h = h0.clone().contiguous()
    c = c0.clone().contiguous()
    h_seq = x.new_empty(batch, steps, hidden)
    c_seq = x.new_empty(batch, steps, hidden)
    acts = x.new_empty(batch, steps, width)
    if batch == 0 or hidden == 0:
        return h_seq, c_seq, h, c, acts
    lens = _lengths(lengths, x)
    w_t = weight_hh.t()
    rec = x.new_empty(batch, width)
    blk, warps = _block(hidden)
    grid = (batch, triton.cdiv(hidden, blk))
    for t in range(steps):
        torch.mm(h, w_t, out=rec)
        _lstm_step_fwd_kernel[grid](
            x, rec, h, c, lens if lens is not None else x, h_seq, c_seq, acts, t, steps, hidden,
            HAS_LEN=lens is not None, ACC=acc_dtype(x.dtype), BLOCK=blk, num_warps=warps,
        )  # fmt: skip
    return h_seq, c_seq, h, c, acts


@_lstm_fwd.register_fake
def _(x_proj, weight_hh, h0, c0, lengths):
    batch, steps, width = x_proj.shape
    hidden = weight_hh.shape[1]
    return (
        x_proj.new_empty(batch, steps, hidden),
        x_proj.new_empty(batch, steps, hidden),
        h0.new_empty(batch, hidden),
        c0.new_empty(batch, hidden),
        x_proj.new_empty(batch, steps, width),
    )


@torch.library.custom_op("ctrlrnn::gpu_lstm_bwd", mutates_args=())
def _lstm_bwd(
    grad_h_seq: Tensor | None,
    grad_c_seq: Tensor | None,
    grad_h_last: Tensor | None,
    grad_c_last: Tensor | None,
    weight_hh: Tensor,
    h0: Tensor,
    c0: Tensor,
    h_seq: Tensor,
    c_seq: Tensor,
    acts: Tensor,
    lengths: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """LSTM backward through time -> (dx_proj, dweight_hh, dh0, dc0)."""
    batch, steps, hidden = h_seq.shape
    dh = grad_h_last.clone().contiguous() if grad_h_last is not None else h0.new_zeros(h0.shape)
    dc = grad_c_last.clone().contiguous() if grad_c_last is not None else c0.new_zeros(c0.shape)
    dgates = torch.empty_like(acts)
    if batch == 0 or hidden == 0 or steps == 0:
        return dgates.zero_(), weight_hh.new_zeros(weight_hh.shape), dh, dc
    lens = _lengths(lengths, acts)
    gh = grad_h_seq.contiguous() if grad_h_seq is not None else None
    gc = grad_c_seq.contiguous() if grad_c_seq is not None else None
    blk, warps = _block(hidden)
    grid = (batch, triton.cdiv(hidden, blk))
    c0c = c0.contiguous()
    for t in range(steps - 1, -1, -1):
        _lstm_step_bwd_kernel[grid](
            gh if gh is not None else acts, gc if gc is not None else acts, acts, c_seq, c0c,
            lens if lens is not None else acts, dh, dc, dgates, t, steps, hidden,
            HAS_GH=gh is not None, HAS_GC=gc is not None, HAS_LEN=lens is not None,
            ACC=acc_dtype(acts.dtype), BLOCK=blk, num_warps=warps,
        )  # fmt: skip
        dh.addmm_(dgates[:, t], weight_hh)
    dw = dgates.reshape(-1, 4 * hidden).t() @ _prev_states(h0, h_seq).reshape(-1, hidden)
    return dgates, dw, dh, dc


@_lstm_bwd.register_fake
def _(grad_h_seq, grad_c_seq, grad_h_last, grad_c_last, weight_hh, h0, c0, h_seq, c_seq, acts,
      lengths):  # fmt: skip
    return (
        acts.new_empty(acts.shape),
        weight_hh.new_empty(weight_hh.shape),
        h0.new_empty(h0.shape),
        c0.new_empty(c0.shape),
    )


def _lstm_setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[Any, ...]) -> None:
    _, weight_hh, h0, c0, lengths = inputs
    h_seq, c_seq, _, _, acts = output
    ctx.save_for_backward(weight_hh, h0, c0, h_seq, c_seq, acts, lengths)
    ctx.set_materialize_grads(False)


def _lstm_backward(ctx: Any, gh: Tensor | None, gc: Tensor | None, ghl: Tensor | None,
                   gcl: Tensor | None, _gacts: Tensor | None) -> tuple[Any, ...]:  # fmt: skip
    weight_hh, h0, c0, h_seq, c_seq, acts, lengths = ctx.saved_tensors
    dx, dw, dh0, dc0 = _lstm_bwd(gh, gc, ghl, gcl, weight_hh, h0, c0, h_seq, c_seq, acts, lengths)
    return dx, dw, dh0, dc0, None


_lstm_fwd.register_autograd(_lstm_backward, setup_context=_lstm_setup)
forbid_double_backward(_lstm_bwd, "gpu_lstm_fwd", "RCRN, CASLSTM (layer 1) on CUDA")


def _compute(x: Tensor) -> torch.dtype:
    acc_dtype(x.dtype)
    return torch.float32 if x.dtype in _HALF else x.dtype


def lstm_sequence(
    x_proj: Tensor,
    weight_hh: Tensor,
    h0: Tensor,
    c0: Tensor,
    lengths: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """LSTM over a batch-first sequence, as :func:`ctrlrnn.ops.cells_ref.lstm_sequence_ref`.

    Args:
        x_proj: ``(B, T, 4H)`` input projections ``x_t W_ih^T + b_ih + b_hh`` (gates i, f, c~, o).
        weight_hh: ``(4H, H)`` recurrent matrix U.
        h0, c0: ``(B, H)`` initial states.
        lengths: optional ``(B,)`` integer lengths in ``[0, T]``.

    Returns:
        ``(h_seq, c_seq, h_last, c_last)``.
    """
    dtype = _compute(x_proj)
    xp, w, h, c = (t.to(dtype) for t in (x_proj, weight_hh, h0, c0))
    out = _lstm_fwd(xp, w, h, c, lengths)[:4]
    return tuple(o.to(x_proj.dtype) for o in out)  # type: ignore[return-value]


# ------------------------------------------------------------------------------------------------
# GRU (torch.nn.GRU formulation)
# ------------------------------------------------------------------------------------------------


@triton.jit(do_not_specialize=["t"])
def _gru_step_fwd_kernel(
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
    pid_b = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    cmask = cols < H
    zero = tl.zeros([BLOCK], tl.int64)
    if HAS_LEN:
        valid = cmask & ((zero + t) < tl.load(len_ptr + pid_b))
    else:
        valid = cmask
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
def _gru_step_bwd_kernel(
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
    pid_b = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    cmask = cols < H
    zero = tl.zeros([BLOCK], tl.int64)
    if HAS_LEN:
        valid = cmask & ((zero + t) < tl.load(len_ptr + pid_b))
    else:
        valid = cmask
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


@torch.library.custom_op("ctrlrnn::gpu_gru_fwd", mutates_args=())
def _gru_fwd(
    x_proj: Tensor, weight_hh: Tensor, bias_hh: Tensor, h0: Tensor, lengths: Tensor | None
) -> tuple[Tensor, Tensor, Tensor]:
    """GRU forward -> (h_seq, h_last, saved r, z, n and U_n h + b_hn)."""
    batch, steps, width = x_proj.shape
    hidden = weight_hh.shape[1]
    x = x_proj.contiguous()
    h = h0.clone().contiguous()
    h_seq = x.new_empty(batch, steps, hidden)
    acts = x.new_empty(batch, steps, 4 * hidden)
    if batch == 0 or hidden == 0:
        return h_seq, h, acts
    lens = _lengths(lengths, x)
    w_t = weight_hh.t()
    rec = x.new_empty(batch, width)
    blk, warps = _block(hidden)
    grid = (batch, triton.cdiv(hidden, blk))
    for t in range(steps):
        torch.addmm(bias_hh, h, w_t, out=rec)
        _gru_step_fwd_kernel[grid](
            x, rec, h, lens if lens is not None else x, h_seq, acts, t, steps, hidden,
            HAS_LEN=lens is not None, ACC=acc_dtype(x.dtype), BLOCK=blk, num_warps=warps,
        )  # fmt: skip
    return h_seq, h, acts


@_gru_fwd.register_fake
def _(x_proj, weight_hh, bias_hh, h0, lengths):
    batch, steps, _ = x_proj.shape
    hidden = weight_hh.shape[1]
    return (
        x_proj.new_empty(batch, steps, hidden),
        h0.new_empty(batch, hidden),
        x_proj.new_empty(batch, steps, 4 * hidden),
    )


@torch.library.custom_op("ctrlrnn::gpu_gru_bwd", mutates_args=())
def _gru_bwd(
    grad_h_seq: Tensor | None,
    grad_h_last: Tensor | None,
    weight_hh: Tensor,
    h0: Tensor,
    h_seq: Tensor,
    acts: Tensor,
    lengths: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """GRU backward through time -> (dx_proj, dweight_hh, dbias_hh, dh0)."""
    batch, steps, hidden = h_seq.shape
    dh = grad_h_last.clone().contiguous() if grad_h_last is not None else h0.new_zeros(h0.shape)
    dx = h_seq.new_zeros(batch, steps, 3 * hidden)
    if batch == 0 or hidden == 0 or steps == 0:
        return dx, weight_hh.new_zeros(weight_hh.shape), weight_hh.new_zeros(3 * hidden), dh
    drec = torch.empty_like(dx)
    lens = _lengths(lengths, acts)
    gh = grad_h_seq.contiguous() if grad_h_seq is not None else None
    blk, warps = _block(hidden)
    grid = (batch, triton.cdiv(hidden, blk))
    h0c = h0.contiguous()
    for t in range(steps - 1, -1, -1):
        _gru_step_bwd_kernel[grid](
            gh if gh is not None else acts, acts, h_seq, h0c, lens if lens is not None else acts,
            dh, dx, drec, t, steps, hidden,
            HAS_GH=gh is not None, HAS_LEN=lens is not None, ACC=acc_dtype(acts.dtype),
            BLOCK=blk, num_warps=warps,
        )  # fmt: skip
        dh.addmm_(drec[:, t], weight_hh)
    flat = drec.reshape(-1, 3 * hidden)
    dw = flat.t() @ _prev_states(h0, h_seq).reshape(-1, hidden)
    return dx, dw, flat.sum(0), dh


@_gru_bwd.register_fake
def _(grad_h_seq, grad_h_last, weight_hh, h0, h_seq, acts, lengths):
    batch, steps, hidden = h_seq.shape
    return (
        h_seq.new_empty(batch, steps, 3 * hidden),
        weight_hh.new_empty(weight_hh.shape),
        weight_hh.new_empty(3 * hidden),
        h0.new_empty(h0.shape),
    )


def _gru_setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[Any, ...]) -> None:
    _, weight_hh, _, h0, lengths = inputs
    h_seq, _, acts = output
    ctx.save_for_backward(weight_hh, h0, h_seq, acts, lengths)
    ctx.set_materialize_grads(False)


def _gru_backward(
    ctx: Any, gh: Tensor | None, ghl: Tensor | None, _gacts: Tensor | None
) -> tuple[Any, ...]:
    weight_hh, h0, h_seq, acts, lengths = ctx.saved_tensors
    dx, dw, db, dh0 = _gru_bwd(gh, ghl, weight_hh, h0, h_seq, acts, lengths)
    return dx, dw, db, dh0, None


_gru_fwd.register_autograd(_gru_backward, setup_context=_gru_setup)
forbid_double_backward(_gru_bwd, "gpu_gru_fwd", "RCRN(cell='gru') on CUDA")


def gru_sequence(
    x_proj: Tensor,
    weight_hh: Tensor,
    bias_hh: Tensor,
    h0: Tensor,
    lengths: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """GRU over a batch-first sequence, as :func:`ctrlrnn.ops.cells_ref.gru_sequence_ref`.

    Args:
        x_proj: ``(B, T, 3H)`` input projections ``x_t W_ih^T + b_ih`` (gates r, z, n).
        weight_hh: ``(3H, H)`` recurrent matrix; bias_hh: ``(3H,)`` recurrent bias.
        h0: ``(B, H)`` initial state.
        lengths: optional ``(B,)`` integer lengths in ``[0, T]``.

    Returns:
        ``(h_seq, h_last)``.
    """
    dtype = _compute(x_proj)
    xp, w, b, h = (t.to(dtype) for t in (x_proj, weight_hh, bias_hh, h0))
    out = _gru_fwd(xp, w, b, h, lengths)[:2]
    return tuple(o.to(x_proj.dtype) for o in out)  # type: ignore[return-value]
