"""GPU fused gated cells: LSTM, GRU, CAS-LSTM, nCARNN and METAGROSS as printed, Haste's recipe
on Triton.

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
  reset product);
* :func:`cas_lstm_sequence` - CAS-LSTM paper eq 7-13 for layers l > 1 (gate order i, f, c~, o, g;
  the vertical forget gate g on the lower layer's cell, ``lambda`` as the factors
  ``scale_f = 1 - lambda`` and ``scale_g = lambda``), and variant (iii) with peepholes, eq 17-18;
* :func:`ncarnn_sequence` - CARNN paper eq 3 (context-projected gates; the context projection is
  one ``(B, 2H)`` tensor shared by all steps, and its gradient is summed over time in the
  backward kernel);
* :func:`metagross_state_sequence` - the METAGROSS unit as printed (METAGROSS paper section 2,
  eq 2-1..2-6, every base map reading ``h_{t-1}``): per step one GEMM gives the recurrent part
  of all ``3N`` base maps of the ``N = 2^L - 1`` units, and one kernel evaluates the whole tree
  (a recursion over the units unrolled at compile time, ``N`` a ``constexpr``: the children's
  outputs stay in registers). The forward saves the pre-activations ``P``; the backward
  recomputes the tree from ``P`` and ``h_{t-1}`` and walks it root-down, each unit recomputing
  its children's subtrees (a unit at depth ``d`` is evaluated ``d + 1`` times: ``O(N L)`` work
  per step and no scratch memory). The depth gates' gradients are sums over channels: each
  channel block writes its partial sums and they are summed over blocks after the loop
  (deterministic, no atomics).

Per-channel parameters shared by the batch (CAS-LSTM's ``scale_f``, ``scale_g`` and peepholes)
get their gradients as per-row sums accumulated by the backward kernels (each program owns one
row, so no atomics) and one reduction over the batch at the end: deterministic.

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
from ctrlrnn.ops.fused_cells import metagross_tree_size
from ctrlrnn.ops.gpu._common import acc_dtype, acc_torch_dtype, sigmoid, tanh

__all__ = [
    "cas_lstm_sequence",
    "gru_sequence",
    "lstm_sequence",
    "metagross_state_sequence",
    "ncarnn_sequence",
]

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


# ------------------------------------------------------------------------------------------------
# CAS-LSTM, layers l > 1 (CAS-LSTM paper eq 7-13; variant (iii) with peepholes, eq 17-18)
# ------------------------------------------------------------------------------------------------


@triton.jit(do_not_specialize=["t"])
def _cas_step_fwd_kernel(
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
    pid_b = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    cmask = cols < H
    zero = tl.zeros([BLOCK], tl.int64)
    if HAS_LEN:
        valid = cmask & ((zero + t) < tl.load(len_ptr + pid_b))
    else:
        valid = cmask
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


@triton.jit(do_not_specialize=["t"])
def _cas_step_bwd_kernel(
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
    i = tl.load(acts_ptr + arow, mask=valid, other=0.0).to(ACC)
    f = tl.load(acts_ptr + arow + H, mask=valid, other=0.0).to(ACC)
    ct = tl.load(acts_ptr + arow + 2 * H, mask=valid, other=0.0).to(ACC)
    o = tl.load(acts_ptr + arow + 3 * H, mask=valid, other=0.0).to(ACC)
    g = tl.load(acts_ptr + arow + 4 * H, mask=valid, other=0.0).to(ACC)
    c = tl.load(cseq_ptr + orow, mask=valid, other=0.0).to(ACC)
    c_prev = tl.load(cseq_ptr + orow - H, mask=valid & ((zero + t) > 0), other=0.0).to(ACC)
    c0 = tl.load(c0_ptr + srow, mask=cmask, other=0.0).to(ACC)
    c_prev = tl.where((zero + t) > 0, c_prev, c0)
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
    ty = dg_ptr.dtype.element_ty
    tl.store(dg_ptr + arow, tl.where(valid, dgi, 0.0).to(ty), mask=cmask)
    tl.store(dg_ptr + arow + H, tl.where(valid, dgf, 0.0).to(ty), mask=cmask)
    tl.store(dg_ptr + arow + 2 * H, tl.where(valid, dgc, 0.0).to(ty), mask=cmask)
    tl.store(dg_ptr + arow + 3 * H, tl.where(valid, dgo, 0.0).to(ty), mask=cmask)
    tl.store(dg_ptr + arow + 4 * H, tl.where(valid, dgg, 0.0).to(ty), mask=cmask)
    tl.store(dlow_ptr + orow, tl.where(valid, dlow, 0.0).to(dlow_ptr.dtype.element_ty), mask=cmask)
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
    tl.store(dc_ptr + srow, tl.where(valid, dcp, dc_in).to(dc_ptr.dtype.element_ty), mask=cmask)
    tl.store(dh_ptr + srow, tl.where(valid, 0.0, dh_in).to(dh_ptr.dtype.element_ty), mask=cmask)


@torch.library.custom_op("ctrlrnn::gpu_cas_lstm_fwd", mutates_args=())
def _cas_fwd(
    x_proj: Tensor,
    weight_hh: Tensor,
    lower_c: Tensor,
    scale_f: Tensor,
    scale_g: Tensor,
    peephole: Tensor | None,
    h0: Tensor,
    c0: Tensor,
    lengths: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """CAS-LSTM forward -> (h_seq, c_seq, h_last, c_last, saved gates i, f, c~, o, g)."""
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
    low = lower_c.contiguous()
    sf, sg = scale_f.contiguous(), scale_g.contiguous()
    pp = peephole.contiguous() if peephole is not None else None
    w_t = weight_hh.t()
    rec = x.new_empty(batch, weight_hh.shape[0])
    blk, warps = _block(hidden)
    grid = (batch, triton.cdiv(hidden, blk))
    for t in range(steps):
        torch.mm(h, w_t, out=rec)
        _cas_step_fwd_kernel[grid](
            x, rec, low, sf, sg, pp if pp is not None else sf, h, c,
            lens if lens is not None else x, h_seq, c_seq, acts, t, steps, hidden,
            PEEP=pp is not None, HAS_LEN=lens is not None, ACC=acc_dtype(x.dtype), BLOCK=blk,
            num_warps=warps,
        )  # fmt: skip
    return h_seq, c_seq, h, c, acts


@_cas_fwd.register_fake
def _(x_proj, weight_hh, lower_c, scale_f, scale_g, peephole, h0, c0, lengths):
    batch, steps, width = x_proj.shape
    hidden = weight_hh.shape[1]
    return (
        x_proj.new_empty(batch, steps, hidden),
        x_proj.new_empty(batch, steps, hidden),
        h0.new_empty(batch, hidden),
        c0.new_empty(batch, hidden),
        x_proj.new_empty(batch, steps, width),
    )


@torch.library.custom_op("ctrlrnn::gpu_cas_lstm_bwd", mutates_args=())
def _cas_bwd(
    grad_h_seq: Tensor | None,
    grad_c_seq: Tensor | None,
    grad_h_last: Tensor | None,
    grad_c_last: Tensor | None,
    weight_hh: Tensor,
    lower_c: Tensor,
    scale_f: Tensor,
    scale_g: Tensor,
    peephole: Tensor | None,
    h0: Tensor,
    c0: Tensor,
    h_seq: Tensor,
    c_seq: Tensor,
    acts: Tensor,
    lengths: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """CAS-LSTM backward through time.

    Returns (dx_proj, dweight_hh, dlower_c, dscale_f, dscale_g, dpeephole, dh0, dc0) as the CPU
    op ``ctrlrnn::cas_lstm_cell_bwd``; dpeephole is (2, H) zeros without peepholes.
    """
    batch, steps, hidden = h_seq.shape
    dh = grad_h_last.clone().contiguous() if grad_h_last is not None else h0.new_zeros(h0.shape)
    dc = grad_c_last.clone().contiguous() if grad_c_last is not None else c0.new_zeros(c0.shape)
    dgates = torch.empty_like(acts)
    dlow = torch.empty_like(h_seq)
    dpar = acts.new_zeros(batch, 4, hidden)
    rows = weight_hh.shape[0]
    if batch == 0 or hidden == 0 or steps == 0:
        return (
            dgates.zero_(), weight_hh.new_zeros(weight_hh.shape), dlow.zero_(),
            scale_f.new_zeros(scale_f.shape), scale_g.new_zeros(scale_g.shape),
            h_seq.new_zeros(2, hidden), dh, dc,
        )  # fmt: skip
    lens = _lengths(lengths, acts)
    gh = grad_h_seq.contiguous() if grad_h_seq is not None else None
    gc = grad_c_seq.contiguous() if grad_c_seq is not None else None
    low = lower_c.contiguous()
    sf, sg = scale_f.contiguous(), scale_g.contiguous()
    pp = peephole.contiguous() if peephole is not None else None
    blk, warps = _block(hidden)
    grid = (batch, triton.cdiv(hidden, blk))
    c0c = c0.contiguous()
    for t in range(steps - 1, -1, -1):
        _cas_step_bwd_kernel[grid](
            gh if gh is not None else acts, gc if gc is not None else acts, acts, c_seq, c0c, low,
            sf, sg, pp if pp is not None else sf, lens if lens is not None else acts,
            dh, dc, dgates, dlow, dpar, t, steps, hidden,
            PEEP=pp is not None, HAS_GH=gh is not None, HAS_GC=gc is not None,
            HAS_LEN=lens is not None, ACC=acc_dtype(acts.dtype), BLOCK=blk, num_warps=warps,
        )  # fmt: skip
        dh.addmm_(dgates[:, t, :rows], weight_hh)
    dw = dgates[..., :rows].reshape(-1, rows).t() @ _prev_states(h0, h_seq).reshape(-1, hidden)
    sums = dpar.sum(0)
    dpp = sums[2:].clone() if pp is not None else h_seq.new_zeros(2, hidden)
    return dgates, dw, dlow, sums[0].clone(), sums[1].clone(), dpp, dh, dc


@_cas_bwd.register_fake
def _(grad_h_seq, grad_c_seq, grad_h_last, grad_c_last, weight_hh, lower_c, scale_f, scale_g,
      peephole, h0, c0, h_seq, c_seq, acts, lengths):  # fmt: skip
    hidden = h_seq.shape[2]
    return (
        acts.new_empty(acts.shape),
        weight_hh.new_empty(weight_hh.shape),
        lower_c.new_empty(lower_c.shape),
        scale_f.new_empty(scale_f.shape),
        scale_g.new_empty(scale_g.shape),
        h_seq.new_empty(2, hidden),
        h0.new_empty(h0.shape),
        c0.new_empty(c0.shape),
    )


def _cas_setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[Any, ...]) -> None:
    _, weight_hh, lower_c, scale_f, scale_g, peephole, h0, c0, lengths = inputs
    h_seq, c_seq, _, _, acts = output
    ctx.save_for_backward(
        weight_hh, lower_c, scale_f, scale_g, peephole, h0, c0, h_seq, c_seq, acts, lengths
    )
    ctx.set_materialize_grads(False)


def _cas_backward(ctx: Any, gh: Tensor | None, gc: Tensor | None, ghl: Tensor | None,
                  gcl: Tensor | None, _gacts: Tensor | None) -> tuple[Any, ...]:  # fmt: skip
    weight_hh, lower_c, scale_f, scale_g, peephole, h0, c0, h_seq, c_seq, acts, lengths = (
        ctx.saved_tensors
    )
    dx, dw, dlow, dsf, dsg, dpp, dh0, dc0 = _cas_bwd(
        gh, gc, ghl, gcl,
        weight_hh, lower_c, scale_f, scale_g, peephole, h0, c0, h_seq, c_seq, acts, lengths,
    )  # fmt: skip
    dpp = dpp if peephole is not None else None
    return dx, dw, dlow, dsf, dsg, dpp, dh0, dc0, None


_cas_fwd.register_autograd(_cas_backward, setup_context=_cas_setup)
forbid_double_backward(_cas_bwd, "gpu_cas_lstm_fwd", "CASLSTM (layers l > 1) on CUDA")


def cas_lstm_sequence(
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
    """CAS-LSTM layer l > 1 over a batch-first sequence (CAS-LSTM paper eq 7-13; eq 17-18 with
    peepholes), as :func:`ctrlrnn.ops.cells_ref.cas_lstm_sequence_ref`.

    ``c_t = i c~ + scale_f f c_{t-1} + scale_g g c^{l-1}_t`` (eq 12 with ``scale_f = 1 - lambda``,
    ``scale_g = lambda``; both ones for the plain sum), ``h_t = o tanh(c_t)`` (eq 13), with the
    vertical forget gate ``g = sig(x_g + U_g h_{t-1})`` (eq 9) or, with peepholes,
    ``g = sig(x_g + p_g1 c_{t-1} + p_g2 c^{l-1}_t)`` (eq 17).

    Args:
        x_proj: ``(B, T, 5H)`` input projections ``h^{l-1}_t W^T + b`` (gates i, f, c~, o, g).
        weight_hh: ``(5H, H)`` recurrent matrix ``(U_i; U_f; U_c; U_o; U_g)``; ``(4H, H)`` with
            peepholes (no ``U_g``).
        lower_c: ``(B, T, H)`` the lower layer's cell sequence ``c^{l-1}``.
        h0, c0: ``(B, H)`` initial states.
        scale_f, scale_g: ``(H,)`` the factors ``1 - lambda`` and ``lambda`` of eq 12
            (differentiable: the trainable-lambda variant gets its gradient through them).
        peephole: optional ``(2, H)`` ``(p_g1, p_g2)`` of eq 17.
        lengths: optional ``(B,)`` integer lengths in ``[0, T]``.

    Returns:
        ``(h_seq, c_seq, h_last, c_last)``.
    """
    dtype = _compute(x_proj)
    xp, w, low, h, c, sf, sg = (
        t.to(dtype) for t in (x_proj, weight_hh, lower_c, h0, c0, scale_f, scale_g)
    )
    pp = peephole.to(dtype) if peephole is not None else None
    out = _cas_fwd(xp, w, low, sf, sg, pp, h, c, lengths)[:4]
    return tuple(o.to(x_proj.dtype) for o in out)  # type: ignore[return-value]


# ------------------------------------------------------------------------------------------------
# nCARNN (CARNN paper eq 3)
# ------------------------------------------------------------------------------------------------


@triton.jit(do_not_specialize=["t"])
def _ncarnn_step_fwd_kernel(
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
    pid_b = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    cmask = cols < H
    zero = tl.zeros([BLOCK], tl.int64)
    if HAS_LEN:
        valid = cmask & ((zero + t) < tl.load(len_ptr + pid_b))
    else:
        valid = cmask
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
def _ncarnn_step_bwd_kernel(
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


@torch.library.custom_op("ctrlrnn::gpu_ncarnn_fwd", mutates_args=())
def _ncarnn_fwd(
    x_proj: Tensor, weight_hh: Tensor, context_proj: Tensor, h0: Tensor, lengths: Tensor | None
) -> tuple[Tensor, Tensor, Tensor]:
    """nCARNN forward -> (h_seq, h_last, saved gates g^u, g^f)."""
    batch, steps, _ = x_proj.shape
    hidden = weight_hh.shape[1]
    x = x_proj.contiguous()
    h = h0.clone().contiguous()
    h_seq = x.new_empty(batch, steps, hidden)
    acts = x.new_empty(batch, steps, 2 * hidden)
    if batch == 0 or hidden == 0:
        return h_seq, h, acts
    lens = _lengths(lengths, x)
    ctx = context_proj.contiguous()
    w_t = weight_hh.t()
    rec = x.new_empty(batch, 2 * hidden)
    blk, warps = _block(hidden)
    grid = (batch, triton.cdiv(hidden, blk))
    for t in range(steps):
        torch.mm(h, w_t, out=rec)
        _ncarnn_step_fwd_kernel[grid](
            x, rec, ctx, h, lens if lens is not None else x, h_seq, acts, t, steps, hidden,
            HAS_LEN=lens is not None, ACC=acc_dtype(x.dtype), BLOCK=blk, num_warps=warps,
        )  # fmt: skip
    return h_seq, h, acts


@_ncarnn_fwd.register_fake
def _(x_proj, weight_hh, context_proj, h0, lengths):
    batch, steps, _ = x_proj.shape
    hidden = weight_hh.shape[1]
    return (
        x_proj.new_empty(batch, steps, hidden),
        h0.new_empty(batch, hidden),
        x_proj.new_empty(batch, steps, 2 * hidden),
    )


@torch.library.custom_op("ctrlrnn::gpu_ncarnn_bwd", mutates_args=())
def _ncarnn_bwd(
    grad_h_seq: Tensor | None,
    grad_h_last: Tensor | None,
    x_proj: Tensor,
    weight_hh: Tensor,
    h0: Tensor,
    h_seq: Tensor,
    acts: Tensor,
    lengths: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """nCARNN backward through time -> (dx_proj, dweight_hh, dcontext_proj, dh0)."""
    batch, steps, hidden = h_seq.shape
    dh = grad_h_last.clone().contiguous() if grad_h_last is not None else h0.new_zeros(h0.shape)
    dx = torch.empty_like(x_proj, memory_format=torch.contiguous_format)
    dctx = h_seq.new_zeros(batch, 2 * hidden)
    if batch == 0 or hidden == 0 or steps == 0:
        return dx.zero_(), weight_hh.new_zeros(weight_hh.shape), dctx, dh
    lens = _lengths(lengths, acts)
    gh = grad_h_seq.contiguous() if grad_h_seq is not None else None
    x = x_proj.contiguous()
    blk, warps = _block(hidden)
    grid = (batch, triton.cdiv(hidden, blk))
    h0c = h0.contiguous()
    for t in range(steps - 1, -1, -1):
        _ncarnn_step_bwd_kernel[grid](
            gh if gh is not None else acts, x, acts, h_seq, h0c,
            lens if lens is not None else acts, dh, dx, dctx, t, steps, hidden,
            HAS_GH=gh is not None, HAS_LEN=lens is not None, ACC=acc_dtype(acts.dtype),
            BLOCK=blk, num_warps=warps,
        )  # fmt: skip
        dh.addmm_(dx[:, t, : 2 * hidden], weight_hh)
    drec = dx[..., : 2 * hidden].reshape(-1, 2 * hidden)
    dw = drec.t() @ _prev_states(h0, h_seq).reshape(-1, hidden)
    return dx, dw, dctx, dh


@_ncarnn_bwd.register_fake
def _(grad_h_seq, grad_h_last, x_proj, weight_hh, h0, h_seq, acts, lengths):
    batch, _, hidden = h_seq.shape
    return (
        x_proj.new_empty(x_proj.shape),
        weight_hh.new_empty(weight_hh.shape),
        h0.new_empty(batch, 2 * hidden),
        h0.new_empty(h0.shape),
    )


def _ncarnn_setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[Any, ...]) -> None:
    x_proj, weight_hh, _, h0, lengths = inputs
    h_seq, _, acts = output
    ctx.save_for_backward(x_proj, weight_hh, h0, h_seq, acts, lengths)
    ctx.set_materialize_grads(False)


def _ncarnn_backward(
    ctx: Any, gh: Tensor | None, ghl: Tensor | None, _gacts: Tensor | None
) -> tuple[Any, ...]:
    x_proj, weight_hh, h0, h_seq, acts, lengths = ctx.saved_tensors
    dx, dw, dctx, dh0 = _ncarnn_bwd(gh, ghl, x_proj, weight_hh, h0, h_seq, acts, lengths)
    return dx, dw, dctx, dh0, None


_ncarnn_fwd.register_autograd(_ncarnn_backward, setup_context=_ncarnn_setup)
forbid_double_backward(_ncarnn_bwd, "gpu_ncarnn_fwd", "CARNN(variant='n') on CUDA")


def ncarnn_sequence(
    x_proj: Tensor,
    weight_hh: Tensor,
    context_proj: Tensor,
    h0: Tensor,
    lengths: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """nCARNN over a batch-first sequence (CARNN paper eq 3), as
    :func:`ctrlrnn.ops.cells_ref.ncarnn_sequence_ref`.

    ``g^u = sig(W^c_u c + W^h_u h_{m-1} + W^e_u e_m + b_u)``, likewise ``g^f``;
    ``h_m = g^u (g^f ebar_m) + (1 - g^u) h_{m-1}`` with ``ebar_m = W_e e_m + b_e``.

    Args:
        x_proj: ``(B, T, 3H)`` ``(W^e_u e_m + b_u, W^e_f e_m + b_f, W_e e_m + b_e)``.
        weight_hh: ``(2H, H)`` ``(W^h_u; W^h_f)``.
        context_proj: ``(B, 2H)`` ``(W^c_u c, W^c_f c)``, once per sequence.
        h0: ``(B, H)`` initial state.
        lengths: optional ``(B,)`` integer lengths in ``[0, T]``.

    Returns:
        ``(h_seq, h_last)``.
    """
    dtype = _compute(x_proj)
    xp, w, ctx, h = (t.to(dtype) for t in (x_proj, weight_hh, context_proj, h0))
    out = _ncarnn_fwd(xp, w, ctx, h, lengths)[:2]
    return tuple(o.to(x_proj.dtype) for o in out)  # type: ignore[return-value]


# ------------------------------------------------------------------------------------------------
# METAGROSS as printed (METAGROSS paper section 2, eq 2-1..2-6: every base map reads h_{t-1})
# ------------------------------------------------------------------------------------------------


def _tree_block(hidden: int) -> tuple[int, int]:
    """Channel block and warps of the METAGROSS step kernels: at most 128 channels and one warp
    per 32 of them, so a thread holds one channel of each vector (the unrolled tree keeps
    several vectors per level live in registers)."""
    blk = max(16, min(128, triton.next_power_of_2(max(hidden, 1))))
    return blk, max(1, blk // 32)


@triton.jit
def _mg_unit_fwd(
    p_ptr,
    rec_ptr,
    save_ptr,
    al_ptr,
    be_ptr,
    prow,
    rrow,
    grow,
    s,
    r,
    mask,
    H,
    K: tl.constexpr,
    S: tl.constexpr,
    NODES: tl.constexpr,
    HAS_REC: tl.constexpr,
    SAVE: tl.constexpr,
    RES: tl.constexpr,
    ACC: tl.constexpr,
):
    """Output ``h_K`` of unit ``K`` (heap order) on a block of channels, its subtree first.

    ``S`` is the first unit of ``K``'s level (``2^(n-1) - 1``), so its maps sit at ``3S + J``
    (F), ``3S + (S + 1) + J`` (O), ``3S + 2(S + 1) + J`` (Z) in units of ``H`` with ``J = K - S``
    (the level-major layout); its children ``2K+1``, ``2K+2`` start level ``2S + 1``. The
    pre-activations are ``P = p[prow + .]`` (``+ rec[rrow + .]`` with ``HAS_REC``), stored into
    ``save[prow + .]`` with ``SAVE``; ``s`` is ``h_{t-1}`` and ``r`` the residual::

        f = sig(P^F + alpha_K (h_{2K+1} - P^F))    (2-1; sig(P^F) at a leaf)
        o = sig(P^O + beta_K  (h_{2K+2} - P^O))    (2-2; sig(P^O) at a leaf)
        z = tanh(P^Z)                               (2-3)
        h = o ((1 - f) s + f z) (+ r)              (2-4..2-6)

    ``K`` and ``S`` are compile-time constants: the recursion unrolls into straight-line code.
    """
    J = K - S
    off_f = (3 * S + J) * H
    off_o = (3 * S + S + 1 + J) * H
    off_z = (3 * S + 2 * (S + 1) + J) * H
    pf = tl.load(p_ptr + prow + off_f, mask=mask, other=0.0).to(ACC)
    po = tl.load(p_ptr + prow + off_o, mask=mask, other=0.0).to(ACC)
    pz = tl.load(p_ptr + prow + off_z, mask=mask, other=0.0).to(ACC)
    if HAS_REC:
        pf += tl.load(rec_ptr + rrow + off_f, mask=mask, other=0.0).to(ACC)
        po += tl.load(rec_ptr + rrow + off_o, mask=mask, other=0.0).to(ACC)
        pz += tl.load(rec_ptr + rrow + off_z, mask=mask, other=0.0).to(ACC)
    if SAVE:
        ty = save_ptr.dtype.element_ty
        tl.store(save_ptr + prow + off_f, pf.to(ty), mask=mask)
        tl.store(save_ptr + prow + off_o, po.to(ty), mask=mask)
        tl.store(save_ptr + prow + off_z, pz.to(ty), mask=mask)
    if K < (NODES - 1) // 2:
        mf = _mg_unit_fwd(p_ptr, rec_ptr, save_ptr, al_ptr, be_ptr, prow, rrow, grow, s, r, mask,
                          H, 2 * K + 1, 2 * S + 1, NODES, HAS_REC, SAVE, RES, ACC)  # fmt: skip
        mo = _mg_unit_fwd(p_ptr, rec_ptr, save_ptr, al_ptr, be_ptr, prow, rrow, grow, s, r, mask,
                          H, 2 * K + 2, 2 * S + 1, NODES, HAS_REC, SAVE, RES, ACC)  # fmt: skip
        a = tl.load(al_ptr + grow + K).to(ACC)
        b = tl.load(be_ptr + grow + K).to(ACC)
        f = sigmoid(pf + a * (mf - pf))  # eq 2-1
        o = sigmoid(po + b * (mo - po))  # eq 2-2
    else:
        f = sigmoid(pf)
        o = sigmoid(po)
    z = tanh(pz)  # eq 2-3
    h = o * ((1.0 - f) * s + f * z)  # eq 2-4, 2-5
    if RES:
        h = h + r  # eq 2-6
    return h


@triton.jit
def _mg_unit_bwd(
    p_ptr,
    al_ptr,
    be_ptr,
    dx_ptr,
    pa_ptr,
    pb_ptr,
    prow,
    grow,
    part,
    s,
    r,
    dh,
    valid,
    cmask,
    H,
    K: tl.constexpr,
    S: tl.constexpr,
    NODES: tl.constexpr,
    RES: tl.constexpr,
    ACC: tl.constexpr,
):
    """Backward of unit ``K``'s subtree (root-down) given ``dh``, the gradient of ``h_K``.

    Recomputes the unit's gates from the saved pre-activations ``P = p[prow + .]`` (its
    children's outputs by :func:`_mg_unit_fwd`, i.e. their whole subtrees), writes ``dP`` of
    its three maps into ``dx[prow + .]`` (zero where not ``valid``), for an internal unit its
    block's partial sums over channels of ``d alpha_K``, ``d beta_K`` into ``pa[part + K]``,
    ``pb[part + K]``, then recurses into the children with ``d h_{2K+1} = alpha_K duf`` and
    ``d h_{2K+2} = beta_K duo`` (``duf``, ``duo``: the gradients of the mixed pre-activations
    inside the sigmoids of eq 2-1, 2-2).

    Returns the subtree's part of ``d h_{t-1}`` (every unit reads ``s`` in eq 2-4) and of
    ``d r_t`` (eq 2-6 adds ``r`` to every unit's output).
    """
    J = K - S
    off_f = (3 * S + J) * H
    off_o = (3 * S + S + 1 + J) * H
    off_z = (3 * S + 2 * (S + 1) + J) * H
    pf = tl.load(p_ptr + prow + off_f, mask=valid, other=0.0).to(ACC)
    po = tl.load(p_ptr + prow + off_o, mask=valid, other=0.0).to(ACC)
    pz = tl.load(p_ptr + prow + off_z, mask=valid, other=0.0).to(ACC)
    if K < (NODES - 1) // 2:
        mf = _mg_unit_fwd(p_ptr, p_ptr, p_ptr, al_ptr, be_ptr, prow, prow, grow, s, r, valid,
                          H, 2 * K + 1, 2 * S + 1, NODES, False, False, RES, ACC)  # fmt: skip
        mo = _mg_unit_fwd(p_ptr, p_ptr, p_ptr, al_ptr, be_ptr, prow, prow, grow, s, r, valid,
                          H, 2 * K + 2, 2 * S + 1, NODES, False, False, RES, ACC)  # fmt: skip
        a = tl.load(al_ptr + grow + K).to(ACC)
        b = tl.load(be_ptr + grow + K).to(ACC)
        f = sigmoid(pf + a * (mf - pf))
        o = sigmoid(po + b * (mo - po))
    else:
        f = sigmoid(pf)
        o = sigmoid(po)
    z = tanh(pz)
    c = (1.0 - f) * s + f * z  # eq 2-4
    dc = dh * o  # eq 2-5: h = o c
    duf = dc * (z - s) * f * (1.0 - f)  # through the sigmoid of eq 2-1
    duo = dh * c * o * (1.0 - o)  # eq 2-2
    ds = dc * (1.0 - f)
    dr = dh
    ty = dx_ptr.dtype.element_ty
    tl.store(dx_ptr + prow + off_z, tl.where(valid, dc * f * (1.0 - z * z), 0.0).to(ty),
             mask=cmask)  # fmt: skip
    if K < (NODES - 1) // 2:
        # d/dP of P + w (m - P), summed as autograd sums it: g - g w (as the CPU kernel)
        tl.store(dx_ptr + prow + off_f, tl.where(valid, duf - duf * a, 0.0).to(ty), mask=cmask)
        tl.store(dx_ptr + prow + off_o, tl.where(valid, duo - duo * b, 0.0).to(ty), mask=cmask)
        pty = pa_ptr.dtype.element_ty
        tl.store(pa_ptr + part + K, tl.sum(tl.where(valid, duf * (mf - pf), 0.0), axis=0).to(pty))
        tl.store(pb_ptr + part + K, tl.sum(tl.where(valid, duo * (mo - po), 0.0), axis=0).to(pty))
        ds_f, dr_f = _mg_unit_bwd(p_ptr, al_ptr, be_ptr, dx_ptr, pa_ptr, pb_ptr, prow, grow, part,
                                  s, r, duf * a, valid, cmask, H, 2 * K + 1, 2 * S + 1, NODES,
                                  RES, ACC)  # fmt: skip
        ds_o, dr_o = _mg_unit_bwd(p_ptr, al_ptr, be_ptr, dx_ptr, pa_ptr, pb_ptr, prow, grow, part,
                                  s, r, duo * b, valid, cmask, H, 2 * K + 2, 2 * S + 1, NODES,
                                  RES, ACC)  # fmt: skip
        ds = ds + ds_f + ds_o
        dr = dr + dr_f + dr_o
    else:
        tl.store(dx_ptr + prow + off_f, tl.where(valid, duf, 0.0).to(ty), mask=cmask)
        tl.store(dx_ptr + prow + off_o, tl.where(valid, duo, 0.0).to(ty), mask=cmask)
    return ds, dr


@triton.jit(do_not_specialize=["t"])
def _mg_step_fwd_kernel(
    x_ptr,
    rec_ptr,
    al_ptr,
    be_ptr,
    res_ptr,
    h_ptr,
    len_ptr,
    hseq_ptr,
    acts_ptr,
    t,
    T,
    H,
    NODES: tl.constexpr,
    RES: tl.constexpr,
    HAS_LEN: tl.constexpr,
    ACC: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """One METAGROSS step (eq 2-1..2-6, the whole tree); grid ``(B, cdiv(H, BLOCK))``.

    ``x`` ``(B, T, 3NH)`` holds the input parts of the ``3N`` base maps (level-major), ``rec``
    ``(B, 3NH)`` is ``h_{t-1} U^T``; ``alpha``, ``beta`` ``(B, T, I)``; ``res`` ``(B, T, H)``.
    Every unit reads the same ``h_{t-1}`` (``h``, updated in place with the root's output); the
    pre-activations ``P = x + rec`` are saved into ``acts`` ``(B, T, 3NH)`` (past the length
    too: the backward masks those steps and never reads them).
    """
    pid_b = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    cmask = cols < H
    zero = tl.zeros([BLOCK], tl.int64)
    if HAS_LEN:
        valid = cmask & ((zero + t) < tl.load(len_ptr + pid_b))
    else:
        valid = cmask
    G = 3 * NODES * H
    prow = (pid_b * T + t) * G + cols
    rrow = pid_b * G + cols
    grow = (pid_b * T + t) * ((NODES - 1) // 2)
    srow = pid_b * H + cols
    orow = (pid_b * T + t) * H + cols
    h_prev = tl.load(h_ptr + srow, mask=cmask, other=0.0).to(ACC)
    if RES:
        r = tl.load(res_ptr + orow, mask=cmask, other=0.0).to(ACC)
    else:
        r = tl.zeros([BLOCK], ACC)
    h_new = _mg_unit_fwd(x_ptr, rec_ptr, acts_ptr, al_ptr, be_ptr, prow, rrow, grow, h_prev, r,
                         cmask, H, 0, 0, NODES, True, True, RES, ACC)  # fmt: skip
    tl.store(h_ptr + srow, tl.where(valid, h_new, h_prev).to(h_ptr.dtype.element_ty), mask=cmask)
    tl.store(hseq_ptr + orow, tl.where(valid, h_new, 0.0).to(hseq_ptr.dtype.element_ty), mask=cmask)


@triton.jit(do_not_specialize=["t"])
def _mg_step_bwd_kernel(
    gh_ptr,
    acts_ptr,
    al_ptr,
    be_ptr,
    res_ptr,
    hseq_ptr,
    h0_ptr,
    len_ptr,
    dh_ptr,
    dx_ptr,
    pa_ptr,
    pb_ptr,
    dres_ptr,
    t,
    B,
    T,
    H,
    NODES: tl.constexpr,
    RES: tl.constexpr,
    HAS_GH: tl.constexpr,
    HAS_LEN: tl.constexpr,
    ACC: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Backward of one METAGROSS step (eq 2-1..2-6); grid ``(B, cdiv(H, BLOCK))``.

    In: the running state gradient ``dh`` ``(B, H)``. Recomputes the tree from the saved ``P``
    and ``h_{t-1}`` and walks it root-down (:func:`_mg_unit_bwd`). Out: ``dx[b, t]`` ``(3NH)``
    (``dP``: the gradient of ``x_proj`` and of the recurrent term, multiplied by ``U`` in a GEMM
    afterwards; zero past the length), ``dres[b, t]``, this channel block's partial sums of
    ``d alpha[b, t]``, ``d beta[b, t]`` into ``pa``, ``pb`` ``(n_blocks, B, T, I)``, and
    ``dh <-`` the direct part ``sum_k o_k (1 - f_k) dh_k`` of ``dh_{t-1}`` (the incoming
    gradient itself past the length).
    """
    pid_b = tl.program_id(0).to(tl.int64)
    blk = tl.program_id(1)
    cols = blk * BLOCK + tl.arange(0, BLOCK)
    cmask = cols < H
    zero = tl.zeros([BLOCK], tl.int64)
    if HAS_LEN:
        valid = cmask & ((zero + t) < tl.load(len_ptr + pid_b))
    else:
        valid = cmask
    internal = (NODES - 1) // 2
    G = 3 * NODES * H
    prow = (pid_b * T + t) * G + cols
    grow = (pid_b * T + t) * internal
    part = ((blk * B + pid_b) * T + t) * internal
    srow = pid_b * H + cols
    orow = (pid_b * T + t) * H + cols
    dh_in = tl.load(dh_ptr + srow, mask=cmask, other=0.0).to(ACC)
    dh = dh_in
    if HAS_GH:
        dh += tl.load(gh_ptr + orow, mask=valid, other=0.0).to(ACC)
    h_prev = tl.load(hseq_ptr + orow - H, mask=valid & ((zero + t) > 0), other=0.0).to(ACC)
    h0 = tl.load(h0_ptr + srow, mask=cmask, other=0.0).to(ACC)
    h_prev = tl.where((zero + t) > 0, h_prev, h0)
    if RES:
        r = tl.load(res_ptr + orow, mask=valid, other=0.0).to(ACC)
    else:
        r = tl.zeros([BLOCK], ACC)
    ds, dr = _mg_unit_bwd(acts_ptr, al_ptr, be_ptr, dx_ptr, pa_ptr, pb_ptr, prow, grow, part,
                          h_prev, r, dh, valid, cmask, H, 0, 0, NODES, RES, ACC)  # fmt: skip
    if RES:
        tl.store(dres_ptr + orow, tl.where(valid, dr, 0.0).to(dres_ptr.dtype.element_ty),
                 mask=cmask)  # fmt: skip
    tl.store(dh_ptr + srow, tl.where(valid, ds, dh_in).to(dh_ptr.dtype.element_ty), mask=cmask)


@torch.library.custom_op("ctrlrnn::gpu_metagross_state_fwd", mutates_args=())
def _metagross_state_fwd(
    x_proj: Tensor,
    weight_hh: Tensor,
    alpha: Tensor,
    beta: Tensor,
    res: Tensor | None,
    h0: Tensor,
    lengths: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor]:
    """METAGROSS (as printed) forward -> (h_seq, h_last, saved pre-activations P)."""
    batch, steps, width = x_proj.shape
    hidden = weight_hh.shape[1]
    x = x_proj.contiguous()
    h = h0.clone().contiguous()
    h_seq = x.new_empty(batch, steps, hidden)
    acts = x.new_empty(batch, steps, width)
    if batch == 0 or hidden == 0:
        return h_seq, h, acts
    nodes, _ = metagross_tree_size(width, hidden)
    lens = _lengths(lengths, x)
    al, be = alpha.contiguous(), beta.contiguous()
    r = res.contiguous() if res is not None else None
    w_t = weight_hh.t()
    rec = x.new_empty(batch, width)
    blk, warps = _tree_block(hidden)
    grid = (batch, triton.cdiv(hidden, blk))
    for t in range(steps):
        torch.mm(h, w_t, out=rec)
        _mg_step_fwd_kernel[grid](
            x, rec, al, be, r if r is not None else x, h, lens if lens is not None else x,
            h_seq, acts, t, steps, hidden,
            NODES=nodes, RES=r is not None, HAS_LEN=lens is not None, ACC=acc_dtype(x.dtype),
            BLOCK=blk, num_warps=warps,
        )  # fmt: skip
    return h_seq, h, acts


@_metagross_state_fwd.register_fake
def _(x_proj, weight_hh, alpha, beta, res, h0, lengths):
    batch, steps, width = x_proj.shape
    hidden = weight_hh.shape[1]
    return (
        x_proj.new_empty(batch, steps, hidden),
        h0.new_empty(batch, hidden),
        x_proj.new_empty(batch, steps, width),
    )


@torch.library.custom_op("ctrlrnn::gpu_metagross_state_bwd", mutates_args=())
def _metagross_state_bwd(
    grad_h_seq: Tensor | None,
    grad_h_last: Tensor | None,
    weight_hh: Tensor,
    alpha: Tensor,
    beta: Tensor,
    res: Tensor | None,
    h0: Tensor,
    h_seq: Tensor,
    acts: Tensor,
    lengths: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """METAGROSS (as printed) backward through time.

    Returns (dx_proj, dweight_hh, dalpha, dbeta, dres, dh0) as the CPU op
    ``ctrlrnn::metagross_state_cell_bwd``; dres is empty without ``res``.
    """
    batch, steps, hidden = h_seq.shape
    width = acts.shape[2]
    dh = grad_h_last.clone().contiguous() if grad_h_last is not None else h0.new_zeros(h0.shape)
    dx = torch.empty_like(acts, memory_format=torch.contiguous_format)
    dres = torch.empty_like(h_seq) if res is not None else h_seq.new_empty(0)
    if batch == 0 or hidden == 0 or steps == 0:
        return (
            dx.zero_(), weight_hh.new_zeros(weight_hh.shape), alpha.new_zeros(alpha.shape),
            beta.new_zeros(beta.shape), dres.zero_(), dh,
        )  # fmt: skip
    nodes, internal = metagross_tree_size(width, hidden)
    lens = _lengths(lengths, acts)
    gh = grad_h_seq.contiguous() if grad_h_seq is not None else None
    P = acts.contiguous()
    al, be = alpha.contiguous(), beta.contiguous()
    r = res.contiguous() if res is not None else None
    blk, warps = _tree_block(hidden)
    n_blocks = triton.cdiv(hidden, blk)
    grid = (batch, n_blocks)
    # per channel block partial sums of d alpha, d beta: every (block, b, t, unit) is written
    part_a = torch.zeros(n_blocks, batch, steps, internal, dtype=acc_torch_dtype(acts.dtype),
                         device=acts.device)  # fmt: skip
    part_b = torch.zeros_like(part_a)
    h0c = h0.contiguous()
    for t in range(steps - 1, -1, -1):
        _mg_step_bwd_kernel[grid](
            gh if gh is not None else P, P, al, be, r if r is not None else P, h_seq, h0c,
            lens if lens is not None else P, dh, dx, part_a, part_b,
            dres if r is not None else dx, t, batch, steps, hidden,
            NODES=nodes, RES=r is not None, HAS_GH=gh is not None, HAS_LEN=lens is not None,
            ACC=acc_dtype(acts.dtype), BLOCK=blk, num_warps=warps,
        )  # fmt: skip
        dh.addmm_(dx[:, t], weight_hh)
    dw = dx.reshape(-1, width).t() @ _prev_states(h0, h_seq).reshape(-1, hidden)
    # the blocks' partial sums in a fixed order: deterministic, no atomics
    dalpha = part_a.sum(0).to(alpha.dtype)
    dbeta = part_b.sum(0).to(beta.dtype)
    return dx, dw, dalpha, dbeta, dres, dh


@_metagross_state_bwd.register_fake
def _(grad_h_seq, grad_h_last, weight_hh, alpha, beta, res, h0, h_seq, acts, lengths):
    return (
        acts.new_empty(acts.shape),
        weight_hh.new_empty(weight_hh.shape),
        alpha.new_empty(alpha.shape),
        beta.new_empty(beta.shape),
        h_seq.new_empty(h_seq.shape) if res is not None else h_seq.new_empty(0),
        h0.new_empty(h0.shape),
    )


def _metagross_state_setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[Any, ...]) -> None:
    _, weight_hh, alpha, beta, res, h0, lengths = inputs
    h_seq, _, acts = output
    ctx.save_for_backward(weight_hh, alpha, beta, res, h0, h_seq, acts, lengths)
    ctx.set_materialize_grads(False)


def _metagross_state_backward(
    ctx: Any, gh: Tensor | None, ghl: Tensor | None, _gacts: Tensor | None
) -> tuple[Any, ...]:
    weight_hh, alpha, beta, res, h0, h_seq, acts, lengths = ctx.saved_tensors
    dx, dw, da, db, dr, dh0 = _metagross_state_bwd(
        gh, ghl, weight_hh, alpha, beta, res, h0, h_seq, acts, lengths
    )
    return dx, dw, da, db, (dr if res is not None else None), dh0, None


_metagross_state_fwd.register_autograd(_metagross_state_backward,
                                       setup_context=_metagross_state_setup)  # fmt: skip
forbid_double_backward(_metagross_state_bwd, "gpu_metagross_state_fwd",
                       "Metagross(gates='state') on CUDA")  # fmt: skip


def metagross_state_sequence(
    x_proj: Tensor,
    weight_hh: Tensor,
    alpha: Tensor,
    beta: Tensor,
    res: Tensor | None,
    h0: Tensor,
    lengths: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The METAGROSS unit as printed (METAGROSS paper section 2) over a batch-first sequence, as
    :func:`ctrlrnn.ops.cells_ref.metagross_state_sequence_ref`.

    Per step, for the ``N = 2^L - 1`` units of the tree in heap order (unit ``k``'s children
    ``2k+1``, ``2k+2``), all reading the root's previous output ``h_{t-1}``::

        P   = x_proj[:, t] + h_{t-1} U^T                    F^*_k(x_t, h_{t-1}), all k
        f_k = sig(P^F_k + alpha_k (h_{2k+1} - P^F_k))       (2-1)
        o_k = sig(P^O_k + beta_k  (h_{2k+2} - P^O_k))       (2-2)
        z_k = tanh(P^Z_k)                                   (2-3)
        c_k = (1 - f_k) h_{t-1} + f_k z_k                   (2-4)
        h_k = o_k c_k (+ r_t)                               (2-5, 2-6)

    (leaves: ``f = sig(P^F)``, ``o = sig(P^O)``); the root's ``h_0`` is the new state.

    Args:
        x_proj: ``(B, T, 3NH)`` the input part of every base map with its bias, level-major
            (``ctrlrnn.nn.metagross.base_index``).
        weight_hh: ``(3NH, H)`` the recurrent part U of every base map, same row order.
        alpha, beta: ``(B, T, I)`` depth gates of the ``I = (N-1)/2`` internal units in heap
            order (``(B, T, 0)`` for ``N = 1``).
        res: ``(B, T, H)`` residual term added to every unit's output (eq 2-6), or None.
        h0: ``(B, H)`` initial state.
        lengths: optional ``(B,)`` integer lengths in ``[0, T]``.

    Returns:
        ``(h_seq, h_last)``.
    """
    dtype = _compute(x_proj)
    xp, w, a, b, h = (t.to(dtype) for t in (x_proj, weight_hh, alpha, beta, h0))
    r = res.to(dtype) if res is not None else None
    out = _metagross_state_fwd(xp, w, a, b, r, h, lengths)[:2]
    return tuple(o.to(x_proj.dtype) for o in out)  # type: ignore[return-value]
