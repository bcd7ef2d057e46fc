"""The METAGROSS unit as printed on Triton (METAGROSS paper section 2, eq 2-1..2-6: every base
map reads ``h_{t-1}``).

Per step one GEMM gives the recurrent part of all ``3N`` base maps of the ``N = 2^L - 1`` units,
and one kernel evaluates the whole tree (a recursion over the units unrolled at compile time,
``N`` a ``constexpr``: the children's outputs stay in registers). The forward saves the
pre-activations ``P``; the backward recomputes the tree from ``P`` and ``h_{t-1}`` and walks it
root-down, each unit recomputing its children's subtrees (a unit at depth ``d`` is evaluated
``d + 1`` times: ``O(N L)`` work per step and no scratch memory). The depth gates' gradients are
sums over channels: each channel block writes its partial sums and they are summed over blocks
after the loop (deterministic, no atomics).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch
import triton
import triton.language as tl
from torch import Tensor

from ctrlrnn.ops.cells.metagross_state import metagross_tree_size
from ctrlrnn.ops.gpu._common import acc_torch_dtype, sigmoid, step_lanes, tanh


def block(hidden: int) -> tuple[int, int]:
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
def _unit_preacts(p_ptr, prow, valid, H, K: tl.constexpr, S: tl.constexpr, ACC: tl.constexpr):
    """Offsets and saved pre-activations ``P^F, P^O, P^Z`` of unit ``K`` (eq 2-1..2-3)."""
    J = K - S
    off_f = (3 * S + J) * H
    off_o = (3 * S + S + 1 + J) * H
    off_z = (3 * S + 2 * (S + 1) + J) * H
    pf = tl.load(p_ptr + prow + off_f, mask=valid, other=0.0).to(ACC)
    po = tl.load(p_ptr + prow + off_o, mask=valid, other=0.0).to(ACC)
    pz = tl.load(p_ptr + prow + off_z, mask=valid, other=0.0).to(ACC)
    return off_f, off_o, off_z, pf, po, pz


@triton.jit
def _store_mix_grads(dx_ptr, pa_ptr, pb_ptr, prow, part, off_f, off_o, duf, duo, a, b, mf, mo,
                     pf, po, valid, cmask, K: tl.constexpr):
    """An internal unit's ``dP^F``, ``dP^O`` through the mixes of eq 2-1, 2-2 and its block's
    partial sums over channels of ``d alpha_K``, ``d beta_K``."""
    ty = dx_ptr.dtype.element_ty
    # d/dP of P + w (m - P), summed as autograd sums it: g - g w (as the CPU kernel)
    tl.store(dx_ptr + prow + off_f, tl.where(valid, duf - duf * a, 0.0).to(ty), mask=cmask)
    tl.store(dx_ptr + prow + off_o, tl.where(valid, duo - duo * b, 0.0).to(ty), mask=cmask)
    pty = pa_ptr.dtype.element_ty
    tl.store(pa_ptr + part + K, tl.sum(tl.where(valid, duf * (mf - pf), 0.0), axis=0).to(pty))
    tl.store(pb_ptr + part + K, tl.sum(tl.where(valid, duo * (mo - po), 0.0), axis=0).to(pty))


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
    off_f, off_o, off_z, pf, po, pz = _unit_preacts(p_ptr, prow, valid, H, K, S, ACC)
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
        _store_mix_grads(dx_ptr, pa_ptr, pb_ptr, prow, part, off_f, off_o, duf, duo, a, b, mf, mo,
                         pf, po, valid, cmask, K)
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
def step_forward(
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
    pid_b, cols, cmask, zero, valid = step_lanes(len_ptr, t, H, HAS_LEN, BLOCK)
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
def step_backward(
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
    pid_b, cols, cmask, zero, valid = step_lanes(len_ptr, t, H, HAS_LEN, BLOCK)
    blk = tl.program_id(1)
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


def _tree(a: SimpleNamespace) -> dict[str, Any]:
    width, hidden = a.weight_hh.shape
    res = a.res.contiguous() if a.res is not None else None
    return {"al_ptr": a.alpha.contiguous(), "be_ptr": a.beta.contiguous(),
            "NODES": metagross_tree_size(width, hidden)[0], "RES": res is not None,
            "res_ptr": res}  # fmt: skip


def forward_operands(a: SimpleNamespace) -> dict[str, Any]:
    ops = _tree(a)
    if ops["res_ptr"] is None:
        ops["res_ptr"] = a.x_proj
    return ops


def backward_operands(a: SimpleNamespace, blocks: int) -> tuple[dict[str, Any], Tensor]:
    batch, steps, hidden = a.h_seq.shape
    ops = _tree(a)
    P = a.acts.contiguous()
    dx = torch.empty_like(a.acts, memory_format=torch.contiguous_format)
    # per channel block partial sums of d alpha, d beta: every (block, b, t, unit) is written
    part_a = torch.zeros(blocks, batch, steps, (ops["NODES"] - 1) // 2,
                         dtype=acc_torch_dtype(a.acts.dtype), device=a.acts.device)  # fmt: skip
    ops.update(acts_ptr=P, hseq_ptr=a.h_seq, h0_ptr=a.h0.contiguous(), dx_ptr=dx, pa_ptr=part_a,
               pb_ptr=torch.zeros_like(part_a), B=batch,
               dres_ptr=torch.empty_like(a.h_seq) if ops["RES"] else dx,
               res_ptr=ops["res_ptr"] if ops["RES"] else P)  # fmt: skip
    return ops, dx


def backward_result(a: SimpleNamespace, ops: dict[str, Any], dw: Tensor,
                    running: list[Tensor]) -> tuple[Tensor, ...]:  # fmt: skip
    """``(dx_proj, dweight_hh, dalpha, dbeta, dres, dh0)``; ``dres`` is empty without ``res``.
    The blocks' partial sums are added in a fixed order: deterministic, no atomics."""
    dalpha = ops["pa_ptr"].sum(0).to(a.alpha.dtype)
    dbeta = ops["pb_ptr"].sum(0).to(a.beta.dtype)
    dres = ops["dres_ptr"] if ops["RES"] else a.h_seq.new_empty(0)
    return ops["dx_ptr"], dw, dalpha, dbeta, dres, running[0]
