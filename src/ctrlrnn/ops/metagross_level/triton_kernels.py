"""Triton kernels for one METAGROSS tree level, gates and scan fused (METAGROSS paper eq 2-1..2-6).

The GPU counterpart of the CPU extension ``metagross`` (``metagross_level.cpp``): :func:`forward`
and :func:`backward` take that extension's arguments and return its outputs, so
:mod:`ctrlrnn.ops.metagross_level` calls ``ext.forward(...)`` / ``ext.backward(...)`` without
knowing the device. For the ``k`` units of a level and every (batch, step, unit, channel)::

    f = sig(pf + alpha (cf - pf))      eq 2-1: alpha M^F + (1 - alpha) F^F  (sig(pf) at leaves)
    o = sig(po + beta  (co - po))      eq 2-2: beta  M^O + (1 - beta)  F^O  (sig(po) at leaves)
    z = tanh(pz)                       eq 2-3
    "h" form (as printed, eq 2-4..2-6):  s_t = o (1 - f) s_{t-1} + o f z (+ x_t),  out_t = s_t
    "c" form (c_{t-1} carried):          s_t = (1 - f) s_{t-1} + f z,  out_t = o s_t (+ x_t)

the diagonal linear scan ``s_t = a_t s_{t-1} + b_t`` with ``a, b`` made from the gates in
registers: ``a, b, f, o, z`` never reach memory. A program owns one batch row and a block of
channels of *all* ``k`` units (a ``(KP, BLOCK)`` tile, ``KP`` the next power of two of ``k``),
like a work item of the CPU kernel, so the residual's gradient (a sum over units, eq 2-6) is
local to the program; the depth gates' gradients (sums over channels) are written per channel
block and summed over blocks in a fixed order afterwards: no atomics, deterministic results.

Backward is one reverse pass over time that recomputes ``f, o, z`` and runs the scan's reverse
recurrence together with the gate gradients, from the final-state gradient::

    d = g_t + carry  ("h"; g_t o + carry for "c");  da = d s_{t-1};  db = d;  carry = d a_t

``carry`` at the end is the gradient of ``s_0``. State and accumulation are fp32 for
fp16/bf16/fp32 inputs (fp64 for fp64); outputs are in the input dtype. With ``lengths``, steps
``t >= lengths[b]`` keep the state and write zeros (outputs and gradients). ``reverse`` (a
keyword the CPU extension does not have; the layers reverse padded inputs themselves) runs each
sequence from its last valid step down to step 0.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from ctrlrnn.ops.gpu._common import (
    acc_dtype,
    acc_torch_dtype,
    interpreting,
    length_of,
    sigmoid,
    sm_count,
    tanh,
)

__all__ = ["backward", "forward"]


@triton.jit
def _level_fwd_kernel(
    P_ptr, bias_ptr, child_ptr, alpha_ptr, beta_ptr, res_ptr, s0_ptr, len_ptr,
    out_ptr, c_ptr, last_ptr,
    sPB, sPT, T, K, H,
    HFORM: tl.constexpr, CHILD: tl.constexpr, RES: tl.constexpr, HAS_S0: tl.constexpr,
    HAS_LEN: tl.constexpr, REVERSE: tl.constexpr, HAS_BIAS: tl.constexpr, ACC: tl.constexpr,
    KP: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """Forward of one (batch row, channel block) over all ``k`` units. Grid ``(B, cdiv(H, BLOCK))``.

    Writes ``out`` (``(B, T, k*H)``, zeros past the length), for the ``"c"`` form the carried
    states ``c`` (same shape, zeros past the length) and the final states ``last`` ``(B, k*H)``.
    """
    b = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    units = tl.arange(0, KP)
    tile = (units[:, None] < K) & (cols[None, :] < H)  # (KP, BLOCK)
    zero = tl.zeros([KP, BLOCK], tl.int64)
    kH = K * H
    uh = units[:, None] * H + cols[None, :]  # a unit's channel in a (k*H) row
    if HAS_LEN:
        L = tl.load(len_ptr + b)
    else:
        L = T
    if HAS_S0:
        s = tl.load(s0_ptr + b * kH + uh, mask=tile, other=0.0).to(ACC)
    else:
        s = tl.zeros([KP, BLOCK], ACC)
    if HAS_BIAS:  # the base maps' biases (section 2.2), the same at every step
        bf = tl.load(bias_ptr + uh, mask=tile, other=0.0).to(ACC)
        bo = tl.load(bias_ptr + kH + uh, mask=tile, other=0.0).to(ACC)
        bz = tl.load(bias_ptr + 2 * kH + uh, mask=tile, other=0.0).to(ACC)
    for j in range(0, T):
        sj = zero + j  # processing index, as a tile
        valid = tile & (sj < L)
        if REVERSE:
            t = tl.where(sj < L, L - 1 - sj, sj)
        else:
            t = sj
        row = b * T + t  # (KP, BLOCK) int64
        p_off = b * sPB + t * sPT + uh
        pf = tl.load(P_ptr + p_off, mask=valid, other=0.0).to(ACC)
        po = tl.load(P_ptr + p_off + kH, mask=valid, other=0.0).to(ACC)
        pz = tl.load(P_ptr + p_off + 2 * kH, mask=valid, other=0.0).to(ACC)
        if HAS_BIAS:
            pf = pf + bf
            po = po + bo
            pz = pz + bz
        if CHILD:
            c_off = (row * K + units[:, None]) * 2 * H + cols[None, :]
            cf = tl.load(child_ptr + c_off, mask=valid, other=0.0).to(ACC)
            co = tl.load(child_ptr + c_off + H, mask=valid, other=0.0).to(ACC)
            g_off = row * K + units[:, None]
            al = tl.load(alpha_ptr + g_off, mask=valid, other=0.0).to(ACC)
            be = tl.load(beta_ptr + g_off, mask=valid, other=0.0).to(ACC)
            pf = pf + al * (cf - pf)  # eq 2-1
            po = po + be * (co - po)  # eq 2-2
        f = sigmoid(pf)
        o = sigmoid(po)
        z = tanh(pz)  # eq 2-3
        if RES:
            x = tl.load(res_ptr + row * H + cols[None, :], mask=valid, other=0.0).to(ACC)
        if HFORM:  # eq 2-4..2-6: a = o (1 - f), b = o f z (+ x)
            bb = o * f * z
            if RES:
                bb = bb + x
            s = tl.where(valid, o * (1.0 - f) * s + bb, s)
            h = s
        else:  # c_t = (1 - f) c_{t-1} + f z;  h_t = o c_t (+ x)
            s = tl.where(valid, (1.0 - f) * s + f * z, s)
            h = o * s
            if RES:
                h = h + x
            tl.store(c_ptr + row * kH + uh, tl.where(valid, s, 0.0).to(c_ptr.dtype.element_ty),
                     mask=tile)  # fmt: skip
        o_off = row * kH + uh
        tl.store(out_ptr + o_off, tl.where(valid, h, 0.0).to(out_ptr.dtype.element_ty), mask=tile)
    tl.store(last_ptr + b * kH + uh, s.to(last_ptr.dtype.element_ty), mask=tile)


@triton.jit
def _bwd_entry(glast_ptr, s0_ptr, b, kH, uh, tile, HAS_GLAST: tl.constexpr,
               HAS_S0: tl.constexpr, ACC: tl.constexpr, KP: tl.constexpr, BLOCK: tl.constexpr):
    """The reverse pass's starting carry (the final-state gradient, or zero) and ``s_0`` (or
    zero), as ``(KP, BLOCK)`` tiles in ``ACC``."""
    if HAS_GLAST:
        carry = tl.load(glast_ptr + b * kH + uh, mask=tile, other=0.0).to(ACC)
    else:
        carry = tl.zeros([KP, BLOCK], ACC)
    if HAS_S0:
        s0 = tl.load(s0_ptr + b * kH + uh, mask=tile, other=0.0).to(ACC)
    else:
        s0 = tl.zeros([KP, BLOCK], ACC)
    return carry, s0


@triton.jit
def _bias_setup(bias_ptr, kH, uh, tile, ACC: tl.constexpr, KP: tl.constexpr,
                BLOCK: tl.constexpr):
    """The base maps' biases ``bf, bo, bz`` (section 2.2) and their zeroed gradient sums."""
    bf = tl.load(bias_ptr + uh, mask=tile, other=0.0).to(ACC)
    bo = tl.load(bias_ptr + kH + uh, mask=tile, other=0.0).to(ACC)
    bz = tl.load(bias_ptr + 2 * kH + uh, mask=tile, other=0.0).to(ACC)
    dbf = tl.zeros([KP, BLOCK], ACC)
    dbo = tl.zeros([KP, BLOCK], ACC)
    dbz = tl.zeros([KP, BLOCK], ACC)
    return bf, bo, bz, dbf, dbo, dbz


@triton.jit
def _bwd_rows(zero, T, j, L, tile, REVERSE: tl.constexpr):
    """Processing index ``sj`` of reverse step ``j`` (last first) as a tile, its mask
    ``valid``, its time step ``t`` and the previous step ``t_prev`` in processing order."""
    sj = zero + (T - 1 - j)
    valid = tile & (sj < L)
    if REVERSE:
        t = tl.where(sj < L, L - 1 - sj, sj)
        t_prev = t + 1
    else:
        t = sj
        t_prev = t - 1
    return sj, valid, t, t_prev


@triton.jit
def _time_row(T, j, L, REVERSE: tl.constexpr):
    """The time step of reverse step ``j`` as a scalar (the same for every channel)."""
    r = T - 1 - j
    if REVERSE:
        r = tl.where(r < L, L - 1 - r, r)
    return r


@triton.jit
def _preacts(P_ptr, p_off, kH, valid, ACC: tl.constexpr):
    """The base maps' pre-activations ``F^F, F^O`` and ``z``'s of one step, in ``ACC``."""
    pf = tl.load(P_ptr + p_off, mask=valid, other=0.0).to(ACC)
    po = tl.load(P_ptr + p_off + kH, mask=valid, other=0.0).to(ACC)
    pz = tl.load(P_ptr + p_off + 2 * kH, mask=valid, other=0.0).to(ACC)
    return pf, po, pz


@triton.jit
def _child_inputs(child_ptr, alpha_ptr, beta_ptr, row, units, cols, K, H, valid,
                  ACC: tl.constexpr):
    """The children's ``M^F, M^O`` and the depth gates ``alpha, beta`` of eq 2-1 / 2-2, with
    the children's offset ``c_off``."""
    c_off = (row * K + units[:, None]) * 2 * H + cols[None, :]
    cf = tl.load(child_ptr + c_off, mask=valid, other=0.0).to(ACC)
    co = tl.load(child_ptr + c_off + H, mask=valid, other=0.0).to(ACC)
    g_off = row * K + units[:, None]
    al = tl.load(alpha_ptr + g_off, mask=valid, other=0.0).to(ACC)
    be = tl.load(beta_ptr + g_off, mask=valid, other=0.0).to(ACC)
    return cf, co, al, be, c_off


@triton.jit
def _out_grad_prev(gout_ptr, saved_ptr, o_off, b, T, t_prev, kH, uh, valid, sj, s0,
                   HAS_G: tl.constexpr, ACC: tl.constexpr, KP: tl.constexpr,
                   BLOCK: tl.constexpr):
    """The output's gradient ``g_t`` (or zero) and the state ``s_{t-1}`` (``s_0`` first)."""
    if HAS_G:
        g = tl.load(gout_ptr + o_off, mask=valid, other=0.0).to(ACC)
    else:
        g = tl.zeros([KP, BLOCK], ACC)
    prev = tl.load(saved_ptr + (b * T + t_prev) * kH + uh, mask=valid & (sj > 0), other=0.0)
    prev = tl.where(sj > 0, prev.to(ACC), s0)
    return g, prev


@triton.jit
def _step_grads(saved_ptr, o_off, g, carry, prev, f, o, z, valid, HFORM: tl.constexpr,
                ACC: tl.constexpr):
    """One reverse step of the scan (eq 2-4..2-6) and the gate activations: the new carry,
    the gradients at the sigmoids' and tanh's inputs (eq 2-1, 2-2, 2-3) and the residual's
    per-unit gradient ``dr``."""
    if HFORM:  # s = o (1 - f) s_prev + o f z (+ x), out = s
        d = g + carry
        ga = d * prev
        new_carry = d * (o * (1.0 - f))
        g_o = ga * (1.0 - f) + d * f * z
        g_f = o * (d * z - ga)
        g_z = d * o * f
        dr = d
    else:  # s = (1 - f) s_prev + f z, out = o s (+ x)
        cur = tl.load(saved_ptr + o_off, mask=valid, other=0.0).to(ACC)
        d = g * o + carry
        ga = d * prev
        new_carry = d * (1.0 - f)
        g_o = g * cur
        g_f = d * z - ga
        g_z = d * f
        dr = g
    gsf = g_f * f * (1.0 - f)  # through the sigmoid of eq 2-1
    gso = g_o * o * (1.0 - o)  # eq 2-2
    dpz = g_z * (1.0 - z * z)  # eq 2-3
    return new_carry, gsf, gso, dpz, dr


@triton.jit
def _child_grads(dP_ptr, dchild_ptr, pa_ptr, pb_ptr, d_off, c_off, part, gsf, gso, al, be,
                 cf, co, rpf, rpo, valid, tile, umask, kH, H):
    """Through the depth-gate mixes of eq 2-1 / 2-2: store ``dP``'s f and o rows, ``dchild``
    and the depth gates' partial gradients ``pa, pb`` at ``part``; return ``dpf, dpo``."""
    ety = dP_ptr.dtype.element_ty
    # d/dp of p + w (c - p) summed as autograd sums it: g - g w (see the CPU kernel)
    dpf = tl.where(valid, gsf - gsf * al, 0.0)
    dpo = tl.where(valid, gso - gso * be, 0.0)
    tl.store(dP_ptr + d_off, dpf.to(ety), mask=tile)
    tl.store(dP_ptr + d_off + kH, dpo.to(ety), mask=tile)
    tl.store(dchild_ptr + c_off, tl.where(valid, gsf * al, 0.0).to(ety), mask=tile)
    tl.store(dchild_ptr + c_off + H, tl.where(valid, gso * be, 0.0).to(ety), mask=tile)
    ta = tl.sum(tl.where(valid, gsf * (cf - rpf), 0.0), axis=1)  # (KP,)
    tb = tl.sum(tl.where(valid, gso * (co - rpo), 0.0), axis=1)
    tl.store(pa_ptr + part, ta.to(pa_ptr.dtype.element_ty), mask=umask)
    tl.store(pb_ptr + part, tb.to(pb_ptr.dtype.element_ty), mask=umask)
    return dpf, dpo


@triton.jit
def _store_bias_grad(db_ptr, b, kH, uh, tile, dbf, dbo, dbz):
    """This batch row's sums over its steps of ``dP`` (summed over rows on the host)."""
    dty = db_ptr.dtype.element_ty
    tl.store(db_ptr + b * 3 * kH + uh, dbf.to(dty), mask=tile)
    tl.store(db_ptr + b * 3 * kH + kH + uh, dbo.to(dty), mask=tile)
    tl.store(db_ptr + b * 3 * kH + 2 * kH + uh, dbz.to(dty), mask=tile)


@triton.jit
def _level_bwd_kernel(
    gout_ptr, glast_ptr, P_ptr, bias_ptr, child_ptr, alpha_ptr, beta_ptr, s0_ptr, len_ptr,
    saved_ptr, dP_ptr, dchild_ptr, pa_ptr, pb_ptr, dres_ptr, ds0_ptr, db_ptr,
    sPB, sPT, B, T, K, H,
    HFORM: tl.constexpr, CHILD: tl.constexpr, RES: tl.constexpr, HAS_S0: tl.constexpr,
    HAS_G: tl.constexpr, HAS_GLAST: tl.constexpr, HAS_LEN: tl.constexpr,
    REVERSE: tl.constexpr, HAS_BIAS: tl.constexpr, ACC: tl.constexpr, KP: tl.constexpr,
    BLOCK: tl.constexpr,
):  # fmt: skip
    """Reverse pass of one (batch row, channel block) over all ``k`` units (module docstring).

    Writes ``dP`` ``(B, T, 3, k, H)`` (contiguous), ``dchild`` ``(B, T, k, 2, H)``, the depth
    gates' per-block partial gradients ``pa``, ``pb`` ``(n_blocks, B, T, k)`` (fp32/fp64),
    ``dres`` ``(B, T, H)``, ``ds0`` ``(B, k*H)`` and, with a bias, each batch row's sum over its
    steps of ``dP``, ``db`` ``(B, 3, k, H)`` (fp32/fp64). ``saved``: the forward's carried states.
    """
    b = tl.program_id(0).to(tl.int64)
    blk = tl.program_id(1)
    cols = blk * BLOCK + tl.arange(0, BLOCK)
    units = tl.arange(0, KP)
    umask = units < K
    tile = umask[:, None] & (cols[None, :] < H)
    zero = tl.zeros([KP, BLOCK], tl.int64)
    kH = K * H
    uh = units[:, None] * H + cols[None, :]
    L = length_of(len_ptr, b, T, HAS_LEN)
    carry, s0 = _bwd_entry(glast_ptr, s0_ptr, b, kH, uh, tile, HAS_GLAST, HAS_S0, ACC, KP, BLOCK)
    if HAS_BIAS:
        bf, bo, bz, dbf, dbo, dbz = _bias_setup(bias_ptr, kH, uh, tile, ACC, KP, BLOCK)
    for j in range(0, T):
        sj, valid, t, t_prev = _bwd_rows(zero, T, j, L, tile, REVERSE)
        row = b * T + t
        p_off = b * sPB + t * sPT + uh
        rpf, rpo, pz = _preacts(P_ptr, p_off, kH, valid, ACC)
        if HAS_BIAS:  # F = W x_t + b (section 2.2)
            rpf = rpf + bf
            rpo = rpo + bo
            pz = pz + bz
        pf = rpf
        po = rpo
        if CHILD:
            cf, co, al, be, c_off = _child_inputs(child_ptr, alpha_ptr, beta_ptr, row, units, cols,
                                                  K, H, valid, ACC)
            pf = pf + al * (cf - pf)
            po = po + be * (co - po)
        f = sigmoid(pf)
        o = sigmoid(po)
        z = tanh(pz)
        o_off = row * kH + uh
        g, prev = _out_grad_prev(gout_ptr, saved_ptr, o_off, b, T, t_prev, kH, uh, valid, sj, s0,
                                 HAS_G, ACC, KP, BLOCK)
        new_carry, gsf, gso, dpz, dr = _step_grads(saved_ptr, o_off, g, carry, prev, f, o, z,
                                                   valid, HFORM, ACC)
        carry = tl.where(valid, new_carry, carry)
        d_off = row * 3 * kH + uh
        ety = dP_ptr.dtype.element_ty
        if CHILD:  # the depth gates' row: t of this step (same for every channel)
            part = ((blk * B + b) * T + _time_row(T, j, L, REVERSE)) * K + units
            dpf, dpo = _child_grads(dP_ptr, dchild_ptr, pa_ptr, pb_ptr, d_off, c_off, part, gsf,
                                    gso, al, be, cf, co, rpf, rpo, valid, tile, umask, kH, H)
        else:
            dpf = tl.where(valid, gsf, 0.0)
            dpo = tl.where(valid, gso, 0.0)
            tl.store(dP_ptr + d_off, dpf.to(ety), mask=tile)
            tl.store(dP_ptr + d_off + kH, dpo.to(ety), mask=tile)
        dpz = tl.where(valid, dpz, 0.0)
        tl.store(dP_ptr + d_off + 2 * kH, dpz.to(ety), mask=tile)
        if HAS_BIAS:
            dbf += dpf
            dbo += dpo
            dbz += dpz
        if RES:  # the residual reaches every unit's output (eq 2-6): sum over units
            dres = tl.sum(tl.where(valid, dr, 0.0), axis=0)  # (BLOCK,)
            tl.store(dres_ptr + (b * T + _time_row(T, j, L, REVERSE)) * H + cols,
                     dres.to(dres_ptr.dtype.element_ty), mask=cols < H)  # fmt: skip
    tl.store(ds0_ptr + b * kH + uh, carry.to(ds0_ptr.dtype.element_ty), mask=tile)
    if HAS_BIAS:  # this batch row's sums over its steps, summed over rows on the host
        _store_bias_grad(db_ptr, b, kH, uh, tile, dbf, dbo, dbz)


def _block(batch: int, k: int, hidden: int, device: torch.device) -> tuple[int, int, int]:
    """``(KP, BLOCK, num_warps)``: the unit tile and the channel block.

    The tile ``KP * BLOCK`` stays at most 1024 values (registers); the channel block shrinks
    (down to 16) while ``batch * cdiv(hidden, BLOCK)`` programs would not give every SM two.
    """
    kp = triton.next_power_of_2(max(k, 1))
    if interpreting():
        return kp, 16, 1
    block = max(16, min(128, 1024 // kp, triton.next_power_of_2(max(hidden, 1))))
    sms = sm_count(device)
    while block > 16 and batch * triton.cdiv(hidden, block) < 2 * sms:
        block //= 2
    return kp, block, max(1, min(4, kp * block // 256))


def _dims(P: Tensor) -> tuple[int, int, int, int]:
    if P.dim() != 5 or P.shape[2] != 3:
        raise ValueError(f"P: expected a (B, T, 3, k, H) tensor, got {tuple(P.shape)}")
    B, T, _, k, H = P.shape
    packed = (H <= 1 or P.stride(4) == 1) and (k <= 1 or P.stride(3) == H) and P.stride(2) == k * H
    if not packed:
        raise ValueError("P: expected packed (3, k, H) rows (strides (k*H, H, 1) of its last "
                         "three dims)")  # fmt: skip
    acc_dtype(P.dtype)
    return B, T, k, H


def _check(name: str, x: Tensor | None, numel: int, P: Tensor) -> None:
    if x is None:
        return
    if not x.is_contiguous() or x.numel() != numel or x.dtype != P.dtype or x.device != P.device:
        raise ValueError(f"{name}: expected a contiguous tensor of {numel} elements, dtype "
                         f"{P.dtype} on {P.device}")  # fmt: skip


def _lengths(lengths: Tensor | None, batch: int, steps: int, device: torch.device):
    if lengths is None:
        return None
    if lengths.shape != (batch,):
        raise ValueError(f"lengths: expected shape ({batch},), got {tuple(lengths.shape)}")
    return lengths.to(device=device, dtype=torch.int64).contiguous()


def forward(
    P: Tensor, child: Tensor | None, alpha: Tensor | None, beta: Tensor | None,
    res: Tensor | None, s0: Tensor | None, lengths: Tensor | None, h_form: bool,
    bias: Tensor | None = None, *, reverse: bool = False,
) -> list[Tensor]:  # fmt: skip
    """``[out (B, T, k*H), c (B, T, k*H) for the "c" form else empty, last state (B, k*H)]``.

    Same contract as the CPU extension's ``forward`` (eq 2-1..2-6, module docstring): ``P``
    ``(B, T, 3, k, H)`` with packed ``(3, k, H)`` rows (any batch and step strides), ``child``
    ``(B, T, k, 2, H)``, ``alpha``/``beta`` ``(B, T, k, 1)``, ``res`` ``(B, T, 1, H)``, ``s0``
    ``(B, k*H)`` contiguous or None; ``lengths`` ``(B,)`` integers in ``[0, T]`` on any device;
    ``bias`` ``(3*k*H,)`` contiguous (added to ``P``) or None.
    """
    B, T, k, H = _dims(P)
    if (child is None) != (alpha is None) or (child is None) != (beta is None):
        raise ValueError("child: child, alpha and beta must be given together")
    _check("child", child, B * T * k * 2 * H, P)
    _check("alpha", alpha, B * T * k, P)
    _check("beta", beta, B * T * k, P)
    _check("res", res, B * T * H, P)
    _check("s0", s0, B * k * H, P)
    _check("bias", bias, 3 * k * H, P)
    out = torch.empty(B, T, k * H, dtype=P.dtype, device=P.device)
    c = P.new_empty(0) if h_form else torch.empty_like(out)
    last = torch.empty(B, k * H, dtype=P.dtype, device=P.device)
    if B == 0 or k * H == 0:
        return [out, c, last]
    lens = _lengths(lengths, B, T, P.device)
    kp, block, warps = _block(B, k, H, P.device)
    _level_fwd_kernel[(B, triton.cdiv(H, block))](
        P, bias if bias is not None else P, child if child is not None else P,
        alpha if alpha is not None else P, beta if beta is not None else P,
        res if res is not None else P,
        s0 if s0 is not None else P, lens if lens is not None else P,
        out, c if not h_form else out, last,
        P.stride(0), P.stride(1), T, k, H,
        HFORM=bool(h_form), CHILD=child is not None, RES=res is not None, HAS_S0=s0 is not None,
        HAS_LEN=lens is not None, REVERSE=bool(reverse), HAS_BIAS=bias is not None,
        ACC=acc_dtype(P.dtype), KP=kp, BLOCK=block, num_warps=warps,
    )  # fmt: skip
    return [out, c, last]


def backward(
    grad_out: Tensor | None, grad_last: Tensor | None, P: Tensor, child: Tensor | None,
    alpha: Tensor | None, beta: Tensor | None, s0: Tensor | None, lengths: Tensor | None,
    saved: Tensor, h_form: bool, has_res: bool, bias: Tensor | None = None, *,
    reverse: bool = False,
) -> list[Tensor]:  # fmt: skip
    """``[dP, dchild, dalpha, dbeta, dres, ds0, dbias]``, an empty tensor for an absent input.

    Same contract as the CPU extension's ``backward``: ``saved`` is the forward's carried states
    ``(B, T, k*H)`` (``out`` for the ``"h"`` form, ``c`` for the ``"c"`` form); ``grad_out``
    ``(B, T, k*H)`` and ``grad_last`` ``(B, k*H)`` may each be None.
    """
    B, T, k, H = _dims(P)
    kH = k * H
    _check("child", child, B * T * k * 2 * H, P)
    _check("alpha", alpha, B * T * k, P)
    _check("beta", beta, B * T * k, P)
    _check("s0", s0, B * kH, P)
    _check("saved", saved, B * T * kH, P)
    _check("grad_out", grad_out, B * T * kH, P)
    _check("grad_last", grad_last, B * kH, P)
    _check("bias", bias, 3 * kH, P)
    dP = torch.empty(B, T, 3, k, H, dtype=P.dtype, device=P.device)
    dchild = torch.empty_like(child) if child is not None else P.new_empty(0)
    dres = torch.empty(B, T, 1, H, dtype=P.dtype, device=P.device) if has_res else P.new_empty(0)
    ds0 = torch.empty(B, kH, dtype=P.dtype, device=P.device)
    kp, block, warps = _block(B, k, H, P.device)
    nblk = triton.cdiv(H, block) if H > 0 else 0
    acc_t = acc_torch_dtype(P.dtype)
    pa = torch.zeros(nblk if child is not None else 0, B, T, k, dtype=acc_t, device=P.device)
    pb = torch.zeros_like(pa)
    # each batch row's sums over its steps of dP, summed over the rows in a fixed order below
    db = torch.zeros(B if bias is not None else 0, 3 * kH, dtype=acc_t, device=P.device)
    if B > 0 and kH > 0:
        lens = _lengths(lengths, B, T, P.device)
        _level_bwd_kernel[(B, nblk)](
            grad_out if grad_out is not None else P, grad_last if grad_last is not None else P,
            P, bias if bias is not None else P, child if child is not None else P,
            alpha if alpha is not None else P, beta if beta is not None else P,
            s0 if s0 is not None else P,
            lens if lens is not None else P, saved,
            dP, dchild if child is not None else dP, pa if child is not None else ds0,
            pb if child is not None else ds0, dres if has_res else dP, ds0,
            db if bias is not None else ds0,
            P.stride(0), P.stride(1), B, T, k, H,
            HFORM=bool(h_form), CHILD=child is not None, RES=bool(has_res),
            HAS_S0=s0 is not None, HAS_G=grad_out is not None,
            HAS_GLAST=grad_last is not None, HAS_LEN=lens is not None, REVERSE=bool(reverse),
            HAS_BIAS=bias is not None, ACC=acc_dtype(P.dtype), KP=kp, BLOCK=block,
            num_warps=warps,
        )  # fmt: skip
    elif has_res:
        dres.zero_()
    if child is not None and alpha is not None and beta is not None:
        # the blocks' partial sums over channels, in a fixed order (deterministic)
        dalpha = pa.sum(0).view(alpha.shape).to(P.dtype)
        dbeta = pb.sum(0).view(beta.shape).to(P.dtype)
    else:
        dalpha, dbeta = P.new_empty(0), P.new_empty(0)
    if kH == 0:
        dP.zero_()
        if child is not None:
            dchild.zero_()
        if has_res:
            dres.zero_()
    dbias = db.sum(0).to(P.dtype) if bias is not None else P.new_empty(0)
    return [dP, dchild, dalpha, dbeta, dres, ds0, dbias]
