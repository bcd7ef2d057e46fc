"""Triton kernels for the RCRN listener (RCRN paper eq 15-16), gates, scan and output in one
pass: the GPU twin of ``csrc/rcrn_listener.cpp``.

The launchers :func:`rcrn_listener_forward` and :func:`rcrn_listener_backward` take the CPU
extension's arguments and return its outputs (:mod:`ctrlrnn.ops.rcrn_listener` has the
semantics): ``c4_t = a_t c4_{t-1} + (h3_t - a_t h3_t)`` with ``a = sigmoid(h1)``, ``h4_t =
gate(h2_t) c4_t``; channels ``[0, split)`` forward in time, ``[split, C)`` from each sequence's
last valid step back; zeros past the length. ``h1``, ``h2``, ``h3`` (and the output gradient)
are read through their batch and time strides (unit channel stride), so torch's bidirectional
LSTM outputs, transposed views, are read in place; the input gradients take the inputs' strides.

A program walks the whole sequence for one batch row and one block of one direction's channels
(grid ``(B, blocks of [0, split) + blocks of [split, C))``), loading ``STEPS`` time steps at once
and stepping through them in registers, as the sequential linear scan does
(:mod:`ctrlrnn.ops.linear_scan.triton_kernels`).
Past a sequence's length ``h1`` is read as ``+inf`` and ``h3`` as 0, so ``a = 1`` keeps the
state (and passes the backward's carry) unchanged.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from ctrlrnn.ops.gpu._common import TunedKernel, acc_dtype, interpreting, sigmoid

__all__ = ["rcrn_listener_backward", "rcrn_listener_forward"]

#: Time steps loaded per tile.
_STEPS = 4 if interpreting() else 16


@triton.jit
def _row(tile, steps, j: tl.constexpr):
    """Row ``j`` of a ``(STEPS, BLOCK)`` tile (the other rows are ``-0.0``: exact)."""
    return tl.sum(tl.where(steps[:, None] == j, tile, -0.0), axis=0)


@triton.jit
def _inputs(h1_ptr, h2_ptr, h3_ptr, s1b, s1t, s2b, s2t, s3b, s3t, b, tc, cols, m_valid,
            ACC: tl.constexpr):  # fmt: skip
    """A tile of ``h1``, ``h2``, ``h3`` at steps ``tc`` (through their strides); past the
    lengths ``h1 = +inf`` (so ``a = 1``) and ``h2 = h3 = 0``."""
    x1 = tl.load(h1_ptr + b * s1b + tc * s1t + cols[None, :], mask=m_valid,
                 other=float("inf")).to(ACC)
    x2 = tl.load(h2_ptr + b * s2b + tc * s2t + cols[None, :], mask=m_valid, other=0.0).to(ACC)
    x3 = tl.load(h3_ptr + b * s3b + tc * s3t + cols[None, :], mask=m_valid, other=0.0).to(ACC)
    return x1, x2, x3


@triton.jit
def _lanes(len_ptr, T, C, SPLIT, HAS_LEN: tl.constexpr, BLOCK: tl.constexpr):
    """``(b, cols, cmask, reverse, L)`` of this program: its batch row, its block of channels
    (of the forward segment ``[0, SPLIT)`` or the reverse one ``[SPLIT, C)``), its direction
    and its sequence length."""
    b = tl.program_id(0).to(tl.int64)
    k = tl.program_id(1)
    n_fw = tl.cdiv(SPLIT, BLOCK)
    reverse = k >= n_fw
    lo = tl.where(reverse, SPLIT, 0)
    hi = tl.where(reverse, C, SPLIT)
    cols = lo + tl.where(reverse, k - n_fw, k) * BLOCK + tl.arange(0, BLOCK)
    if HAS_LEN:
        L = tl.load(len_ptr + b)
    else:
        L = T
    return b, cols, cols < hi, reverse, L


@triton.jit
def _listener_fwd_kernel(
    h1_ptr, h2_ptr, h3_ptr, c0_ptr, len_ptr, out_ptr, cseq_ptr, last_ptr,
    s1b, s1t, s2b, s2t, s3b, s3t, T, C, SPLIT,
    HAS_C0: tl.constexpr, HAS_LEN: tl.constexpr, SIGMOID_GATE: tl.constexpr,
    ACC: tl.constexpr, BLOCK: tl.constexpr, STEPS: tl.constexpr,
):  # fmt: skip
    b, cols, cmask, reverse, L = _lanes(len_ptr, T, C, SPLIT, HAS_LEN, BLOCK)
    if HAS_C0:
        c = tl.load(c0_ptr + b * C + cols, mask=cmask, other=0.0).to(ACC)
    else:
        c = tl.zeros([BLOCK], ACC)
    steps = tl.arange(0, STEPS)
    for j0 in range(0, T, STEPS):
        s = j0 + steps  # processing indices of the tile
        inside = s < T
        valid = inside & (s < L)
        t = tl.where(reverse & (s < L), L - 1 - s, s)
        m_inside = inside[:, None] & cmask[None, :]
        m_valid = valid[:, None] & cmask[None, :]
        tc = t[:, None]
        x1, x2, x3 = _inputs(h1_ptr, h2_ptr, h3_ptr, s1b, s1t, s2b, s2t, s3b, s3t, b, tc,
                             cols, m_valid, ACC)
        cs = tl.zeros([STEPS, BLOCK], ACC)
        for j in tl.static_range(STEPS):
            a = sigmoid(_row(x1, steps, j))
            z = _row(x3, steps, j)
            c = a * c + (z - a * z)  # eq 15; past the length a = 1, z = 0: c is kept
            cs = tl.where(steps[:, None] == j, c[None, :], cs)
        if SIGMOID_GATE:
            gate = sigmoid(x2)
        else:
            gate = x2
        off = b * T * C + tc * C + cols[None, :]
        tl.store(cseq_ptr + off, tl.where(m_valid, cs, 0.0).to(cseq_ptr.dtype.element_ty),
                 mask=m_inside)
        tl.store(out_ptr + off, tl.where(m_valid, gate * cs, 0.0).to(out_ptr.dtype.element_ty),
                 mask=m_inside)  # eq 16
    tl.store(last_ptr + b * C + cols, c.to(last_ptr.dtype.element_ty), mask=cmask)


@triton.jit
def _listener_bwd_kernel(
    g_ptr, gl_ptr, h1_ptr, h2_ptr, h3_ptr, cseq_ptr, c0_ptr, len_ptr,
    d1_ptr, d2_ptr, d3_ptr, dc0_ptr,
    sgb, sgt, s1b, s1t, s2b, s2t, s3b, s3t, e1b, e1t, e2b, e2t, e3b, e3t, T, C, SPLIT,
    HAS_G: tl.constexpr, HAS_GL: tl.constexpr, HAS_C0: tl.constexpr, HAS_LEN: tl.constexpr,
    SIGMOID_GATE: tl.constexpr, ACC: tl.constexpr, BLOCK: tl.constexpr, STEPS: tl.constexpr,
):  # fmt: skip
    b, cols, cmask, reverse, L = _lanes(len_ptr, T, C, SPLIT, HAS_LEN, BLOCK)
    if HAS_GL:
        carry = tl.load(gl_ptr + b * C + cols, mask=cmask, other=0.0).to(ACC)
    else:
        carry = tl.zeros([BLOCK], ACC)
    if HAS_C0:
        c_init = tl.load(c0_ptr + b * C + cols, mask=cmask, other=0.0).to(ACC)
    else:
        c_init = tl.zeros([BLOCK], ACC)
    steps = tl.arange(0, STEPS)
    for j0 in range(0, T, STEPS):
        s = T - 1 - (j0 + steps)  # processing indices, last first
        inside = s >= 0
        valid = inside & (s < L)
        t = tl.where(reverse & (s < L), L - 1 - s, s)
        t_prev = tl.where(reverse, t + 1, t - 1)  # the previous step in processing order
        m_inside = inside[:, None] & cmask[None, :]
        m_valid = valid[:, None] & cmask[None, :]
        tc = t[:, None]
        x1, x2, x3 = _inputs(h1_ptr, h2_ptr, h3_ptr, s1b, s1t, s2b, s2t, s3b, s3t, b, tc,
                             cols, m_valid, ACC)
        cs = tl.load(cseq_ptr + b * T * C + tc * C + cols[None, :], mask=m_valid,
                     other=0.0).to(ACC)
        has_prev = (s > 0)[:, None]
        prev = tl.load(cseq_ptr + b * T * C + t_prev[:, None] * C + cols[None, :],
                       mask=m_valid & has_prev, other=0.0).to(ACC)
        prev = tl.where(has_prev, prev, c_init[None, :])
        if HAS_G:
            g = tl.load(g_ptr + b * sgb + tc * sgt + cols[None, :], mask=m_valid,
                        other=0.0).to(ACC)
        else:
            g = tl.zeros([STEPS, BLOCK], ACC)
        if SIGMOID_GATE:
            gate = sigmoid(x2)
            dgate = gate * (1.0 - gate)
        else:
            gate = x2
            dgate = tl.full([STEPS, BLOCK], 1.0, ACC)
        a_all = sigmoid(x1)
        dc_all = tl.zeros([STEPS, BLOCK], ACC)
        for j in tl.static_range(STEPS):
            dc = _row(g * gate, steps, j) + carry
            dc_all = tl.where(steps[:, None] == j, dc[None, :], dc_all)
            carry = dc * _row(a_all, steps, j)  # past the length a = 1: passed through
        d1 = dc_all * (prev - x3) * a_all * (1.0 - a_all)
        d3 = dc_all * (1.0 - a_all)
        d2 = g * cs * dgate
        tl.store(d1_ptr + b * e1b + tc * e1t + cols[None, :],
                 tl.where(m_valid, d1, 0.0).to(d1_ptr.dtype.element_ty), mask=m_inside)
        tl.store(d2_ptr + b * e2b + tc * e2t + cols[None, :],
                 tl.where(m_valid, d2, 0.0).to(d2_ptr.dtype.element_ty), mask=m_inside)
        tl.store(d3_ptr + b * e3b + tc * e3t + cols[None, :],
                 tl.where(m_valid, d3, 0.0).to(d3_ptr.dtype.element_ty), mask=m_inside)
    tl.store(dc0_ptr + b * C + cols, carry.to(dc0_ptr.dtype.element_ty), mask=cmask)


_fwd_tuned = TunedKernel(_listener_fwd_kernel, key=["C"])
_bwd_tuned = TunedKernel(_listener_bwd_kernel, key=["C"])


def _check(x: Tensor, like: Tensor, name: str) -> None:
    if x.dim() != 3 or x.shape != like.shape or x.dtype != like.dtype or (
            x.numel() > 0 and x.shape[2] > 1 and x.stride(2) != 1):
        raise ValueError(f"{name}: expected a (B, T, C) tensor of the shape and dtype of h1 with "
                         f"unit channel stride, got {tuple(x.shape)} strides {x.stride()}")
    acc_dtype(x.dtype)


def _grid(B: int, C: int, split: int):
    return lambda m: (B, triton.cdiv(split, m["BLOCK"]) + triton.cdiv(C - split, m["BLOCK"]))


def _lengths(lengths: Tensor | None, like: Tensor) -> Tensor:
    if lengths is None:
        return like
    return lengths.to(device=like.device, dtype=torch.int64).contiguous()


def rcrn_listener_forward(
    h1: Tensor, h2: Tensor, h3: Tensor, c0: Tensor | None, lengths: Tensor | None, split: int,
    sigmoid_gate: bool,
) -> list[Tensor]:  # fmt: skip
    """``[h4, c4, c4_last]`` (the CPU extension's function of the same name)."""
    for x, name in ((h1, "h1"), (h2, "h2"), (h3, "h3")):
        _check(x, h1, name)
    B, T, C = h1.shape
    out = torch.empty(B, T, C, dtype=h1.dtype, device=h1.device)
    cseq = torch.empty_like(out)
    last = torch.empty(B, C, dtype=h1.dtype, device=h1.device)
    if B == 0 or C == 0:
        return [out, cseq, last]
    _fwd_tuned.launch(
        (C, h1.dtype, h1.device), _grid(B, C, split),
        h1, h2, h3, c0 if c0 is not None else h1, _lengths(lengths, h1), out, cseq, last,
        h1.stride(0), h1.stride(1), h2.stride(0), h2.stride(1), h3.stride(0), h3.stride(1),
        T, C, split,
        HAS_C0=c0 is not None, HAS_LEN=lengths is not None, SIGMOID_GATE=bool(sigmoid_gate),
        ACC=acc_dtype(h1.dtype), STEPS=_STEPS,
    )  # fmt: skip
    return [out, cseq, last]


def rcrn_listener_backward(
    grad_out: Tensor | None, grad_last: Tensor | None, h1: Tensor, h2: Tensor, h3: Tensor,
    cseq: Tensor, c0: Tensor | None, lengths: Tensor | None, split: int, sigmoid_gate: bool,
) -> list[Tensor]:  # fmt: skip
    """``[dh1, dh2, dh3, dc0]`` (the CPU extension's function of the same name)."""
    for x, name in ((h1, "h1"), (h2, "h2"), (h3, "h3")):
        _check(x, h1, name)
    if grad_out is not None:
        _check(grad_out, h1, "grad_out")
    B, T, C = h1.shape
    d1, d2, d3 = torch.empty_like(h1), torch.empty_like(h2), torch.empty_like(h3)
    dc0 = torch.empty(B, C, dtype=h1.dtype, device=h1.device)
    if B == 0 or C == 0:
        return [d1, d2, d3, dc0]
    g = grad_out if grad_out is not None else h1
    _bwd_tuned.launch(
        (C, h1.dtype, h1.device), _grid(B, C, split),
        g, grad_last if grad_last is not None else h1, h1, h2, h3, cseq.contiguous(),
        c0 if c0 is not None else h1, _lengths(lengths, h1), d1, d2, d3, dc0,
        g.stride(0), g.stride(1), h1.stride(0), h1.stride(1), h2.stride(0), h2.stride(1),
        h3.stride(0), h3.stride(1), d1.stride(0), d1.stride(1), d2.stride(0), d2.stride(1),
        d3.stride(0), d3.stride(1), T, C, split,
        HAS_G=grad_out is not None, HAS_GL=grad_last is not None, HAS_C0=c0 is not None,
        HAS_LEN=lengths is not None, SIGMOID_GATE=bool(sigmoid_gate),
        ACC=acc_dtype(h1.dtype), STEPS=_STEPS,
    )  # fmt: skip
    return [d1, d2, d3, dc0]
