"""Triton kernels for the diagonal linear scan ``h_t = a_t h_{t-1} + b_t``.

The launchers :func:`linear_scan_forward` and :func:`linear_scan_backward` take the arguments of
the CPU extension's functions of the same name (``linear_scan.cpp``) and return the same outputs,
so :mod:`ctrlrnn.ops.linear_scan` dispatches to them unchanged. Semantics (shared with the CPU
kernels and :func:`ctrlrnn.linear_scan_ref`):

* forward: ``h_t = a_t h_{t-1} + b_t`` from ``h0`` (zeros when absent), state in fp32 (fp64 for
  fp64 inputs), outputs in the input dtype;
* ``lengths``: steps ``t >= lengths[b]`` leave the state unchanged and output zero; ``reverse``
  runs each sequence from its own last valid step down to step 0;
* backward, one reverse pass from the final-state gradient:
  ``d = g_t + carry; db_t = d; da_t = d * h_{t-1}; carry = d * a_t``; ``carry`` at the end is
  ``dh0``. ``h_{t-1}`` is read back from the forward output (``h0`` at the first step).

Two ways to run each direction:

* **sequential** (:func:`_scan_fwd_kernel` with one chunk): a program per (batch row, block of
  channels) walks the whole sequence; memory traffic is the minimum (read ``a``, ``b``, write
  ``h``). Used whenever ``B * C`` gives the GPU enough programs.
* **chunked**, for long sequences with small ``B * C``: time (in processing order) is split into
  ``n`` chunks. (1) Every chunk runs its local scan from a zero state in parallel and keeps only
  its summary: the cumulative product of ``a`` over the chunk, ``P_k``, and its final local
  state ``S_k`` (:func:`_scan_fwd_kernel` with ``SUMMARY``). (2) One short scan over chunks
  computes the state entering each chunk, ``h_in(k+1) = P_k h_in(k) + S_k``
  (:func:`ctrlrnn.ops.gpu._common.chunk_carry_kernel`): the product of ``a`` inside a chunk is
  exactly what carries a state across it. (3) Every chunk re-runs its scan from ``h_in(k)`` and
  writes its outputs. Recomputing in (3) instead of fixing up stored local states reads ``a, b``
  twice and writes ``h`` once (5 passes of memory instead of 6) and keeps fp16/bf16 outputs
  exact to one rounding. The backward is the same linear recurrence run backwards in time
  (``carry_{s-1} = a_s (g_s + carry_s)``), chunked the same way.

:func:`ctrlrnn.ops.gpu._common.chunk_length` picks the variant.

Non-finite values: the sequential variant computes exactly the reference's
``a_t * h + b_t`` step by step (past the length ``a = 1, b = 0`` keep even an infinite or NaN
state unchanged), so NaN and +-Inf land where the reference puts them, forward and backward.
The chunked variant is exact for finite values and for NaN anywhere, but its combination
``P_k h_in(k) + S_k`` of a chunk started from zero is not IEEE-exact when the chunk's product
``P_k`` is infinite (an infinite decay ``a``: ``inf * 0`` of the zero start, or the sign of
``inf * h`` differing between the two terms) or underflows to 0 under an infinite state: the
state entering later chunks can then be NaN where the sequential recurrence gives +-Inf. The
decays of the layers (sigmoid gates, ``[0, 1]``) never are infinite; the launchers' ``chunk=0``
forces the sequential variant. QRNN pooling's chunked variant
(:mod:`ctrlrnn.ops.qrnn_pooling.triton_kernels`) has decays in ``[0, 1]``: only the underflow
case applies to it.
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
    interpreting,
    launch_chunk_carry,
    length_of,
    lengths_arg,
    pick_chunk,
)

__all__ = ["linear_scan_backward", "linear_scan_forward"]


@triton.jit
def _step_of(tile, steps, j: tl.constexpr):
    """Row ``j`` of a ``(STEPS, BLOCK)`` tile, exactly: the other rows are ``-0.0`` and
    ``x + (-0.0) == x`` for every ``x`` (signed zeros, infinities and NaN included)."""
    return tl.sum(tl.where(steps[:, None] == j, tile, -0.0), axis=0)


@triton.jit
def _scan_fwd_kernel(
    a_ptr,
    b_ptr,
    init_ptr,
    len_ptr,
    out_ptr,
    last_ptr,
    prod_ptr,
    state_ptr,
    B,
    T,
    C,
    CHUNK,
    n_chunks,
    HAS_INIT: tl.constexpr,
    HAS_LEN: tl.constexpr,
    REVERSE: tl.constexpr,
    SUMMARY: tl.constexpr,
    ACC: tl.constexpr,
    BLOCK: tl.constexpr,
    STEPS: tl.constexpr,
):
    """Forward scan of one chunk (processing steps ``[k*CHUNK, (k+1)*CHUNK)``) per program.

    Grid ``(B, cdiv(C, BLOCK), n_chunks)``. The initial state is ``init[b, k]`` (``(B, n, C)``;
    ``h0`` when ``n == 1``) or zero. ``SUMMARY`` writes only ``prod[b, k] = prod a`` and
    ``state[b, k] = h``; otherwise ``out`` (zeros past the length) and, from the last chunk,
    ``last``.
    """
    pid_b = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    k = tl.program_id(2)
    cmask = cols < C
    zero = tl.zeros([BLOCK], tl.int64)
    if HAS_LEN:
        L = tl.load(len_ptr + pid_b)
    else:
        L = T
    row = pid_b * T * C
    if HAS_INIT:
        h = tl.load(init_ptr + (pid_b * n_chunks + k) * C + cols, mask=cmask, other=0.0).to(ACC)
    else:
        h = tl.zeros([BLOCK], ACC)
    p = tl.full([BLOCK], 1.0, ACC)
    steps = tl.arange(0, STEPS)
    # a tile of STEPS time steps is loaded at once (many loads in flight per thread: the loop is
    # bound by memory latency otherwise), then walked step by step in registers with the
    # reference's arithmetic a_t * h + b_t
    for j0 in range(0, CHUNK, STEPS):
        s = k * CHUNK + j0 + steps  # processing indices of the tile
        inside = (s < T) & ((j0 + steps) < CHUNK)
        valid = inside & (s < L)
        if REVERSE:
            t = tl.where(s < L, L - 1 - s, s)
        else:
            t = s
        off = row + t[:, None] * C + cols[None, :]
        m_inside = inside[:, None] & cmask[None, :]
        m_valid = valid[:, None] & cmask[None, :]
        a_tile = tl.load(a_ptr + off, mask=m_valid, other=1.0).to(ACC)
        b_tile = tl.load(b_ptr + off, mask=m_valid, other=0.0).to(ACC)
        out = tl.zeros([STEPS, BLOCK], ACC)
        for j in tl.static_range(STEPS):
            a = _step_of(a_tile, steps, j)
            h = a * h + _step_of(b_tile, steps, j)  # a = 1, b = 0 past the length: h is kept
            if SUMMARY:
                p = p * a
            else:
                out = tl.where(steps[:, None] == j, h[None, :], out)
        if not SUMMARY:
            out = tl.where(m_valid, out, 0.0)
            tl.store(out_ptr + off, out.to(out_ptr.dtype.element_ty), mask=m_inside)
    if SUMMARY:
        soff = (pid_b * n_chunks + k) * C + cols
        tl.store(prod_ptr + soff, p.to(prod_ptr.dtype.element_ty), mask=cmask)
        tl.store(state_ptr + soff, h.to(state_ptr.dtype.element_ty), mask=cmask)
    else:
        is_last = cmask & ((zero + k) == n_chunks - 1)
        tl.store(last_ptr + pid_b * C + cols, h.to(last_ptr.dtype.element_ty), mask=is_last)


@triton.jit
def _bwd_tile_steps(k, CHUNK, j0, steps, T, L, REVERSE: tl.constexpr):
    """Processing indices ``s`` of a backward tile (the chunk's last first), their time steps
    ``t`` and the previous step ``t_prev`` in processing order, and the masks ``inside`` (in
    the chunk and the sequence) and ``valid`` (also within the length)."""
    s = k * CHUNK + CHUNK - 1 - (j0 + steps)
    inside = ((j0 + steps) < CHUNK) & (s < T)
    valid = inside & (s < L)
    if REVERSE:
        t = tl.where(s < L, L - 1 - s, s)
        t_prev = t + 1
    else:
        t = s
        t_prev = t - 1
    return s, t, t_prev, inside, valid


@triton.jit
def _prev_state(out_ptr, row, s, t_prev, C, cols, m_valid, h0, ACC: tl.constexpr):
    """``h_{t-1}`` of a tile, read back from the forward output (``h0`` at the first step)."""
    has_prev = (s > 0)[:, None]
    prev_off = row + t_prev[:, None] * C + cols[None, :]
    prev = tl.load(out_ptr + prev_off, mask=m_valid & has_prev, other=0.0).to(ACC)
    return tl.where(has_prev, prev, h0[None, :])


@triton.jit
def _put_grads(da_tile, db_tile, d, prev, steps, j: tl.constexpr):
    """Row ``j`` of the tiles: ``db_t = d`` and ``da_t = d h_{t-1}``."""
    here = steps[:, None] == j
    db_tile = tl.where(here, d[None, :], db_tile)
    da_tile = tl.where(here, (d * _step_of(prev, steps, j))[None, :], da_tile)
    return da_tile, db_tile


@triton.jit
def _bwd_exit(prod_ptr, state_ptr, dh0_ptr, p, carry, pid_b, k, n_chunks, C, cols, cmask,
              SUMMARY: tl.constexpr, BLOCK: tl.constexpr):
    """The backward's end of a chunk: with ``SUMMARY`` ``prod[b, k] = p`` and
    ``state[b, k] = carry``; otherwise ``dh0 = carry`` from chunk 0."""
    if SUMMARY:
        soff = (pid_b * n_chunks + k) * C + cols
        tl.store(prod_ptr + soff, p.to(prod_ptr.dtype.element_ty), mask=cmask)
        tl.store(state_ptr + soff, carry.to(state_ptr.dtype.element_ty), mask=cmask)
    else:
        zero = tl.zeros([BLOCK], tl.int64)
        is_first = cmask & ((zero + k) == 0)
        tl.store(dh0_ptr + pid_b * C + cols, carry.to(dh0_ptr.dtype.element_ty), mask=is_first)


@triton.jit
def _scan_bwd_kernel(
    g_ptr,
    a_ptr,
    out_ptr,
    h0_ptr,
    init_ptr,
    len_ptr,
    da_ptr,
    db_ptr,
    dh0_ptr,
    prod_ptr,
    state_ptr,
    B,
    T,
    C,
    CHUNK,
    n_chunks,
    HAS_G: tl.constexpr,
    HAS_INIT: tl.constexpr,
    HAS_H0: tl.constexpr,
    HAS_LEN: tl.constexpr,
    REVERSE: tl.constexpr,
    SUMMARY: tl.constexpr,
    ACC: tl.constexpr,
    BLOCK: tl.constexpr,
    STEPS: tl.constexpr,
):
    """Backward pass of one chunk, processing steps from the chunk's last down to its first.

    ``d = g_t + carry; db_t = d; da_t = d h_{t-1}; carry = d a_t`` with ``carry`` starting from
    ``init[b, k]`` (the final-state gradient when ``n == 1``). ``SUMMARY`` writes only
    ``prod[b, k] = prod a`` and the chunk's outgoing carry from a zero start into ``state``;
    otherwise ``da``, ``db`` (zeros past the length) and, from chunk 0, ``dh0``.
    """
    pid_b = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    k = tl.program_id(2)
    cmask = cols < C
    L = length_of(len_ptr, pid_b, T, HAS_LEN)
    row = pid_b * T * C
    carry, h0 = backward_entry(init_ptr, h0_ptr, pid_b, k, n_chunks, C, cols, cmask,
                                 HAS_INIT, HAS_H0, ACC, BLOCK)
    p = tl.full([BLOCK], 1.0, ACC)
    steps = tl.arange(0, STEPS)
    # tiles of STEPS time steps, loaded at once and walked in registers, as in the forward
    for j0 in range(0, CHUNK, STEPS):
        s, t, t_prev, inside, valid = _bwd_tile_steps(k, CHUNK, j0, steps, T, L, REVERSE)
        off = row + t[:, None] * C + cols[None, :]
        m_inside = inside[:, None] & cmask[None, :]
        m_valid = valid[:, None] & cmask[None, :]
        a_tile = tl.load(a_ptr + off, mask=m_valid, other=1.0).to(ACC)
        if HAS_G:
            g_tile = tl.load(g_ptr + off, mask=m_valid, other=0.0).to(ACC)
        if not SUMMARY:
            prev = _prev_state(out_ptr, row, s, t_prev, C, cols, m_valid, h0, ACC)
            da_tile = tl.zeros([STEPS, BLOCK], ACC)
            db_tile = tl.zeros([STEPS, BLOCK], ACC)
        for j in tl.static_range(STEPS):
            a = _step_of(a_tile, steps, j)
            if HAS_G:
                d = _step_of(g_tile, steps, j) + carry
            else:
                d = carry
            if SUMMARY:
                p = p * a
            else:
                da_tile, db_tile = _put_grads(da_tile, db_tile, d, prev, steps, j)
            carry = d * a  # past the length g = 0 and a = 1: the carry passes through exactly
        if not SUMMARY:
            db_tile = tl.where(m_valid, db_tile, 0.0)
            da_tile = tl.where(m_valid, da_tile, 0.0)
            tl.store(db_ptr + off, db_tile.to(db_ptr.dtype.element_ty), mask=m_inside)
            tl.store(da_ptr + off, da_tile.to(da_ptr.dtype.element_ty), mask=m_inside)
    _bwd_exit(prod_ptr, state_ptr, dh0_ptr, p, carry, pid_b, k, n_chunks, C, cols, cmask,
              SUMMARY, BLOCK)


_scan_fwd_tuned = TunedKernel(_scan_fwd_kernel, key=["B", "C"])
_scan_bwd_tuned = TunedKernel(_scan_bwd_kernel, key=["B", "C"])

#: Channel block of the chunked passes (their grid is already large; no autotuning, so that the
#: in-place carry pass is never re-run by a benchmark).

#: Time steps loaded per tile by the forward and the backward kernel (the fastest of 8, 16 and
#: 32 for each on Hopper: benchmarks/gpu_scan_overhead.py's sweep).
_STEPS_FWD = 4 if interpreting() else 16
_STEPS_BWD = 4 if interpreting() else 8


def linear_scan_forward(
    a: Tensor,
    b: Tensor,
    h0: Tensor | None,
    lengths: Tensor | None,
    reverse: bool,
    *,
    chunk: int | None = None,
) -> list[Tensor]:
    """``[h, h_last]`` of the linear scan (same contract as the CPU extension's function).

    Args:
        a, b: contiguous ``(B, T, C)`` tensors of one floating dtype on one device.
        h0: optional contiguous ``(B, C)`` initial state.
        lengths: optional ``(B,)`` integer lengths in ``[0, T]`` (moved to the device here).
        reverse: run each sequence backwards within its own length.
        chunk: chunk length of the chunked variant; ``None`` chooses by
            :func:`~ctrlrnn.ops.gpu._common.chunk_length`, ``0`` forces the sequential kernel.
    """
    check_btc(a, "a")
    check_btc(b, "b")
    if a.shape != b.shape or a.dtype != b.dtype:
        raise ValueError(f"b: expected shape {tuple(a.shape)} and dtype {a.dtype}")
    batch, steps, channels = a.shape
    out = torch.empty_like(a)
    last = torch.empty(batch, channels, dtype=a.dtype, device=a.device)
    if batch == 0 or channels == 0:
        return [out, last]
    lens = lengths_arg(lengths, batch, a.device)
    acc = acc_dtype(a.dtype)
    flags = dict(HAS_LEN=lens is not None, REVERSE=bool(reverse), ACC=acc, STEPS=_STEPS_FWD)
    lp = lens if lens is not None else a
    length, n_chunks = pick_chunk(batch, channels, steps, a.device, chunk)
    if n_chunks == 1:
        _scan_fwd_tuned.launch(
            (batch, channels, a.dtype, a.device),
            lambda m: (batch, triton.cdiv(channels, m["BLOCK"]), 1),
            a, b, h0 if h0 is not None else a, lp, out, last, a, a,
            batch, steps, channels, steps, 1,
            HAS_INIT=h0 is not None, SUMMARY=False, **flags,
        )  # fmt: skip
        return [out, last]
    prod = torch.empty(batch, n_chunks, channels, dtype=acc_torch_dtype(a.dtype), device=a.device)
    state = torch.empty_like(prod)
    grid = (batch, triton.cdiv(channels, CHUNK_BLOCK), n_chunks)
    _scan_fwd_kernel[grid](
        a, b, a, lp, out, last, prod, state, batch, steps, channels, length, n_chunks,
        HAS_INIT=False, SUMMARY=True, BLOCK=CHUNK_BLOCK, **flags,
    )  # fmt: skip
    launch_chunk_carry(prod, state, h0, backward=False)
    _scan_fwd_kernel[grid](
        a, b, state, lp, out, last, prod, state, batch, steps, channels, length, n_chunks,
        HAS_INIT=True, SUMMARY=False, BLOCK=CHUNK_BLOCK, **flags,
    )  # fmt: skip
    return [out, last]


def linear_scan_backward(
    grad_out: Tensor | None,
    grad_last: Tensor | None,
    a: Tensor,
    out: Tensor,
    h0: Tensor | None,
    lengths: Tensor | None,
    reverse: bool,
    *,
    chunk: int | None = None,
) -> list[Tensor]:
    """``[da, db, dh0]`` of the linear scan (same contract as the CPU extension's function).

    ``grad_out`` ``(B, T, C)`` and ``grad_last`` ``(B, C)`` are the gradients of the outputs and
    of the final state (either may be None); ``out`` is the forward output. ``chunk`` as in
    :func:`linear_scan_forward`.
    """
    check_btc(a, "a")
    check_btc(out, "out")
    batch, steps, channels = a.shape
    if grad_out is not None:
        check_btc(grad_out, "grad_out")
    if grad_last is not None and (
        not grad_last.is_contiguous() or grad_last.numel() != batch * channels
    ):
        raise ValueError(f"grad_last: expected a contiguous ({batch}, {channels}) tensor")
    da = torch.empty_like(a)
    db = torch.empty_like(a)
    dh0 = torch.empty(batch, channels, dtype=a.dtype, device=a.device)
    if batch == 0 or channels == 0:
        return [da, db, dh0]
    lens = lengths_arg(lengths, batch, a.device)
    flags = dict(
        HAS_G=grad_out is not None,
        HAS_H0=h0 is not None,
        HAS_LEN=lens is not None,
        REVERSE=bool(reverse),
        ACC=acc_dtype(a.dtype),
        STEPS=_STEPS_BWD,
    )
    g = grad_out if grad_out is not None else a
    hp = h0 if h0 is not None else a
    lp = lens if lens is not None else a
    length, n_chunks = pick_chunk(batch, channels, steps, a.device, chunk)
    if n_chunks == 1:
        _scan_bwd_tuned.launch(
            (batch, channels, a.dtype, a.device),
            lambda m: (batch, triton.cdiv(channels, m["BLOCK"]), 1),
            g, a, out, hp, grad_last if grad_last is not None else a, lp, da, db, dh0, a, a,
            batch, steps, channels, steps, 1,
            HAS_INIT=grad_last is not None, SUMMARY=False, **flags,
        )  # fmt: skip
        return [da, db, dh0]
    prod = torch.empty(batch, n_chunks, channels, dtype=acc_torch_dtype(a.dtype), device=a.device)
    state = torch.empty_like(prod)
    grid = (batch, triton.cdiv(channels, CHUNK_BLOCK), n_chunks)
    _scan_bwd_kernel[grid](
        g, a, out, hp, a, lp, da, db, dh0, prod, state,
        batch, steps, channels, length, n_chunks,
        HAS_INIT=False, SUMMARY=True, BLOCK=CHUNK_BLOCK, **flags,
    )  # fmt: skip
    launch_chunk_carry(prod, state, grad_last, backward=True)
    _scan_bwd_kernel[grid](
        g, a, out, hp, state, lp, da, db, dh0, prod, state,
        batch, steps, channels, length, n_chunks,
        HAS_INIT=True, SUMMARY=False, BLOCK=CHUNK_BLOCK, **flags,
    )  # fmt: skip
    return [da, db, dh0]
