"""Triton kernels for QRNN pooling fused with the gate activations and zoneout (QRNN paper eq 1-6).

The launchers :func:`qrnn_pooling_forward` and :func:`qrnn_pooling_backward` take the arguments
of the CPU extension's functions of the same name (``qrnn_pooling.cpp``) and return the same
outputs, so :mod:`ctrlrnn.ops.qrnn_pooling` dispatches to them unchanged.

``gates`` ``(B, T, G*H)`` holds raw pre-activations ``[Z | F | O | I]``; with ``z = tanh(Z)``,
``f = sigmoid(F)``, ``o = sigmoid(O)``, ``i = sigmoid(I)`` (eq 1-2) and zoneout (eq 6, no
rescaling) ``1 - f -> k (1 - f)`` where ``k = keep * keep_scale`` (a 0/1 mask in training) or
``keep_scale`` (``1 - p`` in evaluation):

* mode 0, f-pooling (eq 3):   ``c_t = (1 - k(1-f)) c_{t-1} + k(1-f) z``, ``h_t = c_t``
* mode 1, fo-pooling (eq 4):  as f-pooling, ``h_t = o c_t``
* mode 2, ifo-pooling (eq 5): ``c_t = (1 - k(1-f)) c_{t-1} + i z``, ``h_t = o c_t``

The forward reads the pre-activations once and writes ``h`` and ``c``; the backward recomputes
the activations and runs one reverse pass, ``dc = carry + g^c_t + g^h_t o_t`` and
``carry = dc (1 - k(1-f))``, from the gradient of the last cell, writing the gradient of the
pre-activations. Both are linear recurrences in ``c`` (resp. ``carry``) with decay
``1 - k(1-f)``, so for long sequences with small ``B * H`` they run chunked exactly like
:mod:`ctrlrnn.ops.linear_scan.triton_kernels` (summary pass, scan over chunk carries, apply pass).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from ctrlrnn.ops.gpu._common import (
    CHUNK_BLOCK,
    TunedKernel,
    acc_dtype,
    acc_torch_dtype,
    backward_entry,
    check_btc,
    launch_chunk_carry,
    length_of,
    lengths_arg,
    pick_chunk,
    sigmoid,
    tanh,
)

__all__ = ["qrnn_pooling_backward", "qrnn_pooling_forward"]

_GATES = (2, 3, 4)


@triton.jit
def _z_f_keep(g_ptr, keep_ptr, gbase, koff, valid, keep_scale, H,
              HAS_KEEP: tl.constexpr, ACC: tl.constexpr, BLOCK: tl.constexpr):
    """``z = tanh(Z)``, ``f = sigmoid(F)`` (eq 1-2), the zoneout factor ``k`` and the
    zoneout-ed ``1 - f``, ``omf = k (1 - f)`` (eq 6), of one step."""
    z = tanh(tl.load(g_ptr + gbase, mask=valid, other=0.0).to(ACC))
    f = sigmoid(tl.load(g_ptr + gbase + H, mask=valid, other=0.0).to(ACC))
    if HAS_KEEP:
        kk = tl.load(keep_ptr + koff, mask=valid, other=0.0).to(ACC) * keep_scale
    else:
        kk = tl.zeros([BLOCK], ACC) + keep_scale
    omf = kk * (1.0 - f)  # zoneout-ed 1 - f (eq 6)
    return z, f, kk, omf


@triton.jit
def _chunk_exit(prod_ptr, state_ptr, end_ptr, p, v, pid_b, k, k_end, n_chunks, H, cols, cmask,
                SUMMARY: tl.constexpr, BLOCK: tl.constexpr):
    """The end of a chunk: with ``SUMMARY`` ``prod[b, k] = p`` and ``state[b, k] = v``;
    otherwise ``end[b] = v`` from chunk ``k_end`` (the last cell, or ``dc0``)."""
    if SUMMARY:
        soff = (pid_b * n_chunks + k) * H + cols
        tl.store(prod_ptr + soff, p.to(prod_ptr.dtype.element_ty), mask=cmask)
        tl.store(state_ptr + soff, v.to(state_ptr.dtype.element_ty), mask=cmask)
    else:
        zero = tl.zeros([BLOCK], tl.int64)
        is_end = cmask & ((zero + k) == k_end)
        tl.store(end_ptr + pid_b * H + cols, v.to(end_ptr.dtype.element_ty), mask=is_end)


@triton.jit
def _qrnn_fwd_kernel(
    g_ptr,
    init_ptr,
    keep_ptr,
    len_ptr,
    h_ptr,
    c_ptr,
    last_ptr,
    prod_ptr,
    state_ptr,
    keep_scale,
    B,
    T,
    H,
    CHUNK,
    n_chunks,
    MODE: tl.constexpr,
    NG: tl.constexpr,
    HAS_INIT: tl.constexpr,
    HAS_KEEP: tl.constexpr,
    HAS_LEN: tl.constexpr,
    SUMMARY: tl.constexpr,
    ACC: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Forward pooling of steps ``[k*CHUNK, (k+1)*CHUNK)``; grid ``(B, cdiv(H, BLOCK), n)``.

    Initial cell ``init[b, k]`` (``c0`` when ``n == 1``) or zero. ``SUMMARY`` writes only the
    product of the decays ``1 - k(1-f)`` and the final cell from a zero start.
    """
    pid_b = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    k = tl.program_id(2)
    cmask = cols < H
    zero = tl.zeros([BLOCK], tl.int64)
    L = length_of(len_ptr, pid_b, T, HAS_LEN)
    if HAS_INIT:
        c = tl.load(init_ptr + (pid_b * n_chunks + k) * H + cols, mask=cmask, other=0.0).to(ACC)
    else:
        c = tl.zeros([BLOCK], ACC)
    p = tl.full([BLOCK], 1.0, ACC)
    for j in range(0, CHUNK):
        t = zero + (k * CHUNK + j)
        inside = cmask & (t < T)
        valid = inside & (t < L)
        rowt = pid_b * T + t
        gbase = rowt * (NG * H) + cols
        z, f, kk, omf = _z_f_keep(g_ptr, keep_ptr, gbase, rowt * H + cols, valid, keep_scale, H,
                                  HAS_KEEP, ACC, BLOCK)
        if MODE == 2:
            inp = sigmoid(tl.load(g_ptr + gbase + 3 * H, mask=valid, other=0.0).to(ACC)) * z
        else:
            inp = omf * z
        decay = tl.where(valid, 1.0 - omf, 1.0)
        c = decay * c + tl.where(valid, inp, 0.0)  # eq 3 / 4 / 5
        if SUMMARY:
            p = p * decay
        else:
            if MODE == 0:
                h = c
            else:
                h = sigmoid(tl.load(g_ptr + gbase + 2 * H, mask=valid, other=0.0).to(ACC)) * c
            ooff = rowt * H + cols
            tl.store(c_ptr + ooff, tl.where(valid, c, 0.0).to(c_ptr.dtype.element_ty), mask=inside)
            tl.store(h_ptr + ooff, tl.where(valid, h, 0.0).to(h_ptr.dtype.element_ty), mask=inside)
    _chunk_exit(prod_ptr, state_ptr, last_ptr, p, c, pid_b, k, n_chunks - 1, n_chunks, H, cols,
                cmask, SUMMARY, BLOCK)


@triton.jit
def _cell_grad(gh_ptr, gc_ptr, g_ptr, carry, ooff, gbase, valid, H, MODE: tl.constexpr,
               HAS_GH: tl.constexpr, HAS_GC: tl.constexpr, ACC: tl.constexpr,
               BLOCK: tl.constexpr):
    """``dh = g^h_t`` and the cell's gradient ``dc = carry + g^c_t + g^h_t o_t`` (``o = 1``
    in mode 0, eq 3; eq 4-5 otherwise), with ``o_t`` (unused zeros in mode 0)."""
    if HAS_GH:
        dh = tl.load(gh_ptr + ooff, mask=valid, other=0.0).to(ACC)
    else:
        dh = tl.zeros([BLOCK], ACC)
    dc = carry
    if HAS_GC:
        dc = dc + tl.load(gc_ptr + ooff, mask=valid, other=0.0).to(ACC)
    if MODE == 0:
        dc = dc + dh
        o = tl.zeros([BLOCK], ACC)
    else:
        o = sigmoid(tl.load(g_ptr + gbase + 2 * H, mask=valid, other=0.0).to(ACC))
        dc = dc + dh * o
    return dh, dc, o


@triton.jit
def _gate_grads(dg_ptr, g_ptr, cseq_ptr, c0, gbase, ooff, t, valid, inside, z, f, kk, omf,
                dh, dc, o, H, MODE: tl.constexpr, ACC: tl.constexpr):
    """Store the gradients of one step's pre-activations ``Z, F`` (and ``O`` in eq 4-5, ``I``
    in eq 5), zeros past the length, from ``dh``, ``dc`` and ``c_{t-1}`` (``c0`` at step 0)."""
    c = tl.load(cseq_ptr + ooff, mask=valid, other=0.0).to(ACC)
    cprev = tl.load(cseq_ptr + ooff - H, mask=valid & (t > 0), other=0.0).to(ACC)
    cprev = tl.where(t > 0, cprev, c0)
    if MODE != 0:
        d_o = tl.where(valid, dh * c * o * (1.0 - o), 0.0)
        tl.store(dg_ptr + gbase + 2 * H, d_o.to(dg_ptr.dtype.element_ty), mask=inside)
    if MODE == 2:
        # c = (1 - omf) c_prev + i z with omf = k (1 - f): d f = k dc c_prev
        i = sigmoid(tl.load(g_ptr + gbase + 3 * H, mask=valid, other=0.0).to(ACC))
        d_i = tl.where(valid, dc * z * i * (1.0 - i), 0.0)
        tl.store(dg_ptr + gbase + 3 * H, d_i.to(dg_ptr.dtype.element_ty), mask=inside)
        dz = dc * i
        df = kk * dc * cprev
    else:
        # c = c_prev + omf (z - c_prev): d omf = dc (z - c_prev), d f = -k d omf
        dz = dc * omf
        df = -kk * dc * (z - cprev)
    d_z = tl.where(valid, dz * (1.0 - z * z), 0.0)
    d_f = tl.where(valid, df * f * (1.0 - f), 0.0)
    tl.store(dg_ptr + gbase, d_z.to(dg_ptr.dtype.element_ty), mask=inside)
    tl.store(dg_ptr + gbase + H, d_f.to(dg_ptr.dtype.element_ty), mask=inside)


@triton.jit
def _qrnn_bwd_kernel(
    gh_ptr,
    gc_ptr,
    g_ptr,
    cseq_ptr,
    c0_ptr,
    init_ptr,
    keep_ptr,
    len_ptr,
    dg_ptr,
    dc0_ptr,
    prod_ptr,
    state_ptr,
    keep_scale,
    B,
    T,
    H,
    CHUNK,
    n_chunks,
    MODE: tl.constexpr,
    NG: tl.constexpr,
    HAS_GH: tl.constexpr,
    HAS_GC: tl.constexpr,
    HAS_C0: tl.constexpr,
    HAS_INIT: tl.constexpr,
    HAS_KEEP: tl.constexpr,
    HAS_LEN: tl.constexpr,
    SUMMARY: tl.constexpr,
    ACC: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Backward pooling of one chunk, steps from its last down to its first.

    The carry starts from ``init[b, k]`` (the gradient of the last cell when ``n == 1``).
    ``SUMMARY`` writes only the product of the decays and the outgoing carry from a zero start;
    otherwise the gradient of the pre-activations (zeros past the length) and, from chunk 0,
    ``dc0``.
    """
    pid_b = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    k = tl.program_id(2)
    cmask = cols < H
    zero = tl.zeros([BLOCK], tl.int64)
    L = length_of(len_ptr, pid_b, T, HAS_LEN)
    carry, c0 = backward_entry(init_ptr, c0_ptr, pid_b, k, n_chunks, H, cols, cmask,
                                 HAS_INIT, HAS_C0, ACC, BLOCK)
    p = tl.full([BLOCK], 1.0, ACC)
    for j in range(0, CHUNK):
        t = zero + (k * CHUNK + CHUNK - 1 - j)
        inside = cmask & (t < T)
        valid = inside & (t < L)
        rowt = pid_b * T + t
        gbase = rowt * (NG * H) + cols
        ooff = rowt * H + cols
        z, f, kk, omf = _z_f_keep(g_ptr, keep_ptr, gbase, ooff, valid, keep_scale, H,
                                  HAS_KEEP, ACC, BLOCK)
        dh, dc, o = _cell_grad(gh_ptr, gc_ptr, g_ptr, carry, ooff, gbase, valid, H, MODE,
                               HAS_GH, HAS_GC, ACC, BLOCK)
        decay = tl.where(valid, 1.0 - omf, 1.0)
        if SUMMARY:
            p = p * decay
        else:
            _gate_grads(dg_ptr, g_ptr, cseq_ptr, c0, gbase, ooff, t, valid, inside, z, f, kk,
                        omf, dh, dc, o, H, MODE, ACC)
        carry = dc * decay  # past the length every gradient term is 0 and decay 1
    _chunk_exit(prod_ptr, state_ptr, dc0_ptr, p, carry, pid_b, k, 0, n_chunks, H, cols, cmask,
                SUMMARY, BLOCK)


_qrnn_fwd_tuned = TunedKernel(_qrnn_fwd_kernel, key=["B", "H"])
_qrnn_bwd_tuned = TunedKernel(_qrnn_bwd_kernel, key=["B", "H"])



def _geometry(gates: Tensor, mode: int) -> tuple[int, int, int, int]:
    check_btc(gates, "gates")
    if mode not in (0, 1, 2):
        raise ValueError(f"mode: expected 0 (f), 1 (fo) or 2 (ifo), got {mode}")
    ng = _GATES[mode]
    batch, steps, width = gates.shape
    if width % ng:
        raise ValueError(f"gates: last dimension must be a multiple of {ng}, got {width}")
    return batch, steps, width // ng, ng


def _prepare(
    gates: Tensor, keep: Tensor | None, lengths: Tensor | None, batch: int, steps: int, hidden: int
) -> tuple[Tensor | None, Tensor | None]:
    if keep is not None:
        if keep.shape != (batch, steps, hidden):
            raise ValueError(f"keep: expected shape {(batch, steps, hidden)}, got {keep.shape}")
        keep = keep.to(gates.dtype).contiguous()
    return keep, lengths_arg(lengths, batch, gates.device)


def qrnn_pooling_forward(
    gates: Tensor,
    c0: Tensor | None,
    keep: Tensor | None,
    keep_scale: float,
    lengths: Tensor | None,
    mode: int,
    bias: Tensor | None = None,
    *,
    chunk: int | None = None,
) -> list[Tensor]:
    """``[h, c, c_last]`` of QRNN pooling (same contract as the CPU extension's function).

    Args:
        gates: contiguous ``(B, T, G*H)`` raw pre-activations ``[Z | F | O | I]``.
        c0: optional contiguous ``(B, H)`` initial cell.
        keep: optional ``(B, T, H)`` zoneout keep mask; ``keep_scale`` multiplies ``1 - f``.
        lengths: optional ``(B,)`` integer lengths in ``[0, T]``.
        mode: 0 (f), 1 (fo) or 2 (ifo).
        bias: optional ``(G*H,)`` bias of eq 1-2, added to the pre-activations (the layers pass
            it on CPU only, where it saves a pass over the GEMM's output; on CUDA they keep it
            in the GEMM, whose epilogue adds it for free, and this adds it in one op).
        chunk: chunk length of the chunked variant; None chooses, 0 forces the sequential one.
    """
    batch, steps, hidden, ng = _geometry(gates, mode)
    gates = _with_bias(gates, bias, ng * hidden)
    keep, lens = _prepare(gates, keep, lengths, batch, steps, hidden)
    h = torch.empty(batch, steps, hidden, dtype=gates.dtype, device=gates.device)
    c = torch.empty_like(h)
    last = torch.empty(batch, hidden, dtype=gates.dtype, device=gates.device)
    if batch == 0 or hidden == 0:
        return [h, c, last]
    flags = dict(
        MODE=mode,
        NG=ng,
        HAS_KEEP=keep is not None,
        HAS_LEN=lens is not None,
        ACC=acc_dtype(gates.dtype),
    )
    kp = keep if keep is not None else gates
    lp = lens if lens is not None else gates
    ks = float(keep_scale)
    length, n_chunks = pick_chunk(batch, hidden, steps, gates.device, chunk)
    if n_chunks == 1:
        _qrnn_fwd_tuned.launch(
            (batch, hidden, gates.dtype, gates.device),
            lambda m: (batch, triton.cdiv(hidden, m["BLOCK"]), 1),
            gates, c0 if c0 is not None else gates, kp, lp, h, c, last, gates, gates, ks,
            batch, steps, hidden, steps, 1,
            HAS_INIT=c0 is not None, SUMMARY=False, **flags,
        )  # fmt: skip
        return [h, c, last]
    prod = torch.empty(batch, n_chunks, hidden, dtype=acc_torch_dtype(gates.dtype),
                       device=gates.device)  # fmt: skip
    state = torch.empty_like(prod)
    grid = (batch, triton.cdiv(hidden, CHUNK_BLOCK), n_chunks)
    _qrnn_fwd_kernel[grid](
        gates, gates, kp, lp, h, c, last, prod, state, ks,
        batch, steps, hidden, length, n_chunks,
        HAS_INIT=False, SUMMARY=True, BLOCK=CHUNK_BLOCK, **flags,
    )  # fmt: skip
    launch_chunk_carry(prod, state, c0, backward=False)
    _qrnn_fwd_kernel[grid](
        gates, state, kp, lp, h, c, last, prod, state, ks,
        batch, steps, hidden, length, n_chunks,
        HAS_INIT=True, SUMMARY=False, BLOCK=CHUNK_BLOCK, **flags,
    )  # fmt: skip
    return [h, c, last]


def _with_bias(gates: Tensor, bias: Tensor | None, n: int) -> Tensor:
    """``gates + bias`` (a new contiguous tensor), or ``gates`` itself without a bias."""
    if bias is None:
        return gates
    if bias.shape != (n,) or bias.dtype != gates.dtype or bias.device != gates.device:
        raise ValueError(f"bias: expected shape ({n},), dtype {gates.dtype} on {gates.device}")
    return gates + bias


def _with_bias_grad(dgates: Tensor, dc0: Tensor, bias: Tensor | None) -> list[Tensor]:
    """``[dgates, dc0, dbias]``: the bias's gradient is ``dgates`` summed over batch and steps
    (in the accumulation type), empty without a bias."""
    if bias is None:
        return [dgates, dc0, dgates.new_empty(0)]
    acc = acc_torch_dtype(dgates.dtype)
    return [dgates, dc0, dgates.to(acc).sum((0, 1)).to(dgates.dtype)]


def qrnn_pooling_backward(
    grad_h: Tensor | None,
    grad_c: Tensor | None,
    grad_clast: Tensor | None,
    gates: Tensor,
    cseq: Tensor,
    c0: Tensor | None,
    keep: Tensor | None,
    keep_scale: float,
    lengths: Tensor | None,
    mode: int,
    bias: Tensor | None = None,
    *,
    chunk: int | None = None,
) -> list[Tensor]:
    """``[dgates, dc0, dbias]`` of QRNN pooling (same contract as the CPU extension's function;
    ``dbias`` empty without a bias).

    ``grad_h``, ``grad_c`` ``(B, T, H)`` and ``grad_clast`` ``(B, H)`` are the gradients of the
    three outputs (any may be None); ``cseq`` is the forward's cell sequence.
    """
    batch, steps, hidden, ng = _geometry(gates, mode)
    gates = _with_bias(gates, bias, ng * hidden)
    check_btc(cseq, "c")
    for name, g in (("grad_h", grad_h), ("grad_c", grad_c)):
        if g is not None:
            check_btc(g, name)
    if grad_clast is not None and (
        not grad_clast.is_contiguous() or grad_clast.numel() != batch * hidden
    ):
        raise ValueError(f"grad_clast: expected a contiguous ({batch}, {hidden}) tensor")
    keep, lens = _prepare(gates, keep, lengths, batch, steps, hidden)
    dgates = torch.empty_like(gates)
    dc0 = torch.empty(batch, hidden, dtype=gates.dtype, device=gates.device)
    if batch == 0 or hidden == 0:
        return _with_bias_grad(dgates, dc0, bias)
    flags = dict(
        MODE=mode,
        NG=ng,
        HAS_GH=grad_h is not None,
        HAS_GC=grad_c is not None,
        HAS_C0=c0 is not None,
        HAS_KEEP=keep is not None,
        HAS_LEN=lens is not None,
        ACC=acc_dtype(gates.dtype),
    )
    gh = grad_h if grad_h is not None else gates
    gc = grad_c if grad_c is not None else gates
    cp = c0 if c0 is not None else gates
    kp = keep if keep is not None else gates
    lp = lens if lens is not None else gates
    ks = float(keep_scale)
    length, n_chunks = pick_chunk(batch, hidden, steps, gates.device, chunk)
    if n_chunks == 1:
        _qrnn_bwd_tuned.launch(
            (batch, hidden, gates.dtype, gates.device),
            lambda m: (batch, triton.cdiv(hidden, m["BLOCK"]), 1),
            gh, gc, gates, cseq, cp, grad_clast if grad_clast is not None else gates, kp, lp,
            dgates, dc0, gates, gates, ks, batch, steps, hidden, steps, 1,
            HAS_INIT=grad_clast is not None, SUMMARY=False, **flags,
        )  # fmt: skip
        return _with_bias_grad(dgates, dc0, bias)
    prod = torch.empty(batch, n_chunks, hidden, dtype=acc_torch_dtype(gates.dtype),
                       device=gates.device)  # fmt: skip
    state = torch.empty_like(prod)
    grid = (batch, triton.cdiv(hidden, CHUNK_BLOCK), n_chunks)
    _qrnn_bwd_kernel[grid](
        gh, gc, gates, cseq, cp, gates, kp, lp, dgates, dc0, prod, state, ks,
        batch, steps, hidden, length, n_chunks,
        HAS_INIT=False, SUMMARY=True, BLOCK=CHUNK_BLOCK, **flags,
    )  # fmt: skip
    launch_chunk_carry(prod, state, grad_clast, backward=True)
    _qrnn_bwd_kernel[grid](
        gh, gc, gates, cseq, cp, state, kp, lp, dgates, dc0, prod, state, ks,
        batch, steps, hidden, length, n_chunks,
        HAS_INIT=True, SUMMARY=False, BLOCK=CHUNK_BLOCK, **flags,
    )  # fmt: skip
    return _with_bias_grad(dgates, dc0, bias)
