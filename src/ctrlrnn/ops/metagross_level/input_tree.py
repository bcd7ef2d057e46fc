"""A whole METAGROSS tree of ``gates="input"`` with a linear base as one autograd node (CPU).

The tree's pass level by level (:func:`ctrlrnn.nn.metagross_tree.forward_input_gates`) reads
the input ``x`` from several places: each level's base maps ``W x_t`` (section 2.2), the token
depth gates ``alpha, beta = sigmoid(W_a x_t + b_a)`` (section 2.1) and the residual of eq 2-6,
added to every level's units. As separate autograd nodes, each returns its own gradient of
``x`` (a tensor the size of ``x``), and autograd adds them up one pass at a time: five passes
over ``x``'s size for a tree of depth 2, plus the depth gates' own thin products.

Here the tree is one node, and its backward produces ``x``'s gradient once:

* forward: one GEMM for the base maps of every level and the depth gates' logits,
  ``Y = x [W_1; ...; W_L; W_a]^T`` into a cached block; each level's kernel
  (``metagross_level.cpp``, eq 2-1..2-6) reads its column slice of ``Y`` and adds its bias;
* backward: the levels' kernels, root first, write their ``dP`` into the column slices of one
  gradient block ``dY`` (the depth gates' ``dlogits`` into its last columns) and add their
  residual gradients into one tensor; then ``dx = dres + dY W`` is one GEMM accumulating into
  that tensor, and ``dW = dY^T x`` one GEMM for all the rows.

Where no graph can be recorded (decoding step by step), the same forward runs without the
node, the base maps and the depth gates' logits as two products of the weights as they are: no
joint weight is made (it would be a copy of the weights at every call) or kept (a write through
``p.data`` would leave a kept copy stale, unseen).

The arithmetic is the per-level ops' (the same kernels), so results equal theirs to float
rounding of the GEMMs' summation order; :mod:`tests.ops.test_metagross_input_tree` checks them
against the per-level path and float64 ``gradcheck``. It serves the eager CPU path with the
compiled kernels only (:func:`applies`); ``torch.compile``, ``torch.func``, ONNX export,
autocast and CUDA take the per-level custom ops, which trace. Its backward is a composition of
kernels with no derivative of its own: a double backward through it raises the error of
:mod:`ctrlrnn.ops.double_backward`.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ctrlrnn.ops import backend, scan_export
from ctrlrnn.ops.autocast import autocast_dtype
from ctrlrnn.ops.cached_linear import _small
from ctrlrnn.ops.cell_step_grads import records_graph
from ctrlrnn.ops.compiled_op import torchscript_tracing
from ctrlrnn.ops.double_backward import without_derivative
from ctrlrnn.ops.metagross_level.layout import level_columns, level_slice, tree_nodes
from ctrlrnn.ops.validation import check_lengths

__all__ = ["applies", "input_tree"]

#: Tensor types that hold their data (tracers' and transforms' subclasses take the ops).
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def applies(x: Tensor, *tensors: Tensor | None) -> bool:
    """Whether :func:`input_tree` serves ``x`` and the tree's parameters ``tensors``: plain CPU
    tensors with the compiled METAGROSS kernels (not under ``torch.compile``, ``torch.func``,
    ONNX export, TorchScript tracing or autocast, where the per-level custom ops run: a trace
    would record this pass's autograd ``Function`` as an opaque Python op, and the trace's
    check, run without grad, this pass's kernels instead)."""
    if x.device.type != "cpu" or torch.compiler.is_compiling() or torchscript_tracing():
        return False
    if any(t is not None and type(t) not in _PLAIN for t in (x, *tensors)):
        return False
    if scan_export.active() or autocast_dtype(x.device) is not None:
        return False
    return backend.has_kernel("metagross", x.device)


#: The joint GEMM's rows are padded to a multiple of this many (64 bytes of float32): the levels'
#: kernels read and write column slices of its output and its gradient, whose rows then start
#: on whole cache lines (streaming stores of partial lines are several times slower).
ROW_MULTIPLE = 16


def _joint_weight(weight: Tensor, depth_weight: Tensor | None) -> Tensor:
    """``[weight; depth_weight; 0]``: every base map's rows, then the depth gates' (when given),
    then zero rows up to a multiple of :data:`ROW_MULTIPLE` (``weight`` itself when it needs
    none of these)."""
    if depth_weight is None and weight.shape[0] % ROW_MULTIPLE == 0:
        return weight
    parts = [weight] if depth_weight is None else [weight, depth_weight]
    n = sum(p.shape[0] for p in parts)
    pad = -n % ROW_MULTIPLE
    if pad:
        parts.append(weight.new_zeros(pad, weight.shape[1]))
    return torch.cat(parts)


def _levels_forward(
    ext: Any, x: Tensor, W: Tensor, bias: Tensor | None, depth_weight: Tensor | None,
    depth_bias: Tensor | None, state: Tensor | None, lengths: Tensor | None, depth: int,
    hidden_size: int, h_form: bool, residual: bool, graph: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor, list[dict[str, Any]], Tensor, Tensor]:  # fmt: skip
    """The tree's forward from the weight ``W`` (module docstring: one GEMM, then each level's
    kernel, eq 2-1..2-6, leaves first): ``(out, last, alpha, beta, levels, Y, g)``, ``levels``
    what each level's backward reads (root last), ``Y`` the GEMM's output and ``g`` the depth
    gates. ``W`` is the joint weight, whose rows hold the depth gates' (``depth_weight``
    None), or the base maps' alone, the depth gates' logits then a product of their own with
    ``depth_weight``. ``graph``: inside the autograd node, which must not hold views of its
    own outputs (below); elsewhere the gates' slices are passed as they are."""
    B, T, _ = x.shape
    H, L = hidden_size, depth
    I = tree_nodes(L - 1)  # internal nodes: one alpha and one beta each
    rows = 3 * H * tree_nodes(L)
    # (B, T, 3NH [+ 2I + pad]): every W x_t, and in the node the logits; a small product
    # outside the node takes F.linear, as ops.cached_linear does
    Y = F.linear(x, W) if not graph and _small(x, W) else ext.cached_linear(x, W, None)
    if I > 0:
        logits = Y[..., rows : rows + 2 * I] if depth_weight is None else (
            F.linear(x, depth_weight))  # fmt: skip
        g = torch.sigmoid(logits if depth_bias is None else logits + depth_bias)
    else:
        g = x.new_zeros(B, T, 0)
    alpha, beta = g[..., :I].contiguous(), g[..., I:].contiguous()
    res = x.unsqueeze(2) if residual else None
    levels: list[dict[str, Any]] = []
    child: Tensor | None = None
    finals: list[Tensor] = []
    for level in range(L, 0, -1):  # eq 2-1..2-6, leaves first
        sl, (c0, c1) = level_slice(level), level_columns(level, H)
        k = sl.stop - sl.start
        P = Y[..., c0:c1].view(B, T, 3, k, H)
        ch = a_ = b_ = None
        if child is not None:
            ch = child.view(B, T, k, 2, H)
            a_ = alpha[..., sl].unsqueeze(-1)
            b_ = beta[..., sl].unsqueeze(-1)
            if graph:
                # copies: the node must not hold its own outputs outside save_for_backward
                # (a reference cycle through their grad_fn would keep the tree's blocks alive)
                a_ = a_.clone(memory_format=torch.contiguous_format)
                b_ = b_.clone(memory_format=torch.contiguous_format)
            else:
                a_, b_ = a_.contiguous(), b_.contiguous()
        s0 = None if state is None else state[:, sl.start * H : sl.stop * H].contiguous()
        b_l = None if bias is None else bias[c0:c1]
        out, c, last = ext.forward(P, ch, a_, b_, res, s0, lengths, h_form, b_l)
        # the root's output is this node's output: saved by save_for_backward
        saved = None if (level == 1 and h_form) else (out if h_form else c)
        levels.append({"level": level, "P": P, "child": ch, "alpha": a_, "beta": b_,
                       "s0": s0, "bias": b_l, "saved": saved})  # fmt: skip
        finals.append(last)
        child = out
    assert child is not None
    return child, torch.cat(finals[::-1], dim=1), alpha, beta, levels, Y, g


class _InputTree(torch.autograd.Function):
    """``(x, weight, bias, depth_weight, depth_bias, state) -> (out, last, alpha, beta)``."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, x: Tensor, weight: Tensor, bias: Tensor | None, depth_weight: Tensor | None,
        depth_bias: Tensor | None, state: Tensor | None, lengths: Tensor | None, depth: int,
        hidden_size: int, h_form: bool, residual: bool,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
        ext = backend.kernel_for("metagross", x.device)
        assert ext is not None
        W = _joint_weight(weight, depth_weight)
        child, last, alpha, beta, levels, Y, g = _levels_forward(
            ext, x, W, bias, None, depth_bias, state, lengths, depth, hidden_size, h_form,
            residual, graph=True,
        )  # fmt: skip
        ctx.levels = levels[::-1]  # root first, the order of the backward
        ctx.W, ctx.Y, ctx.g = W, Y, g  # intermediates
        B, T, _ = x.shape
        ctx.shape = (B, T, hidden_size, depth, tree_nodes(depth - 1),
                     3 * hidden_size * tree_nodes(depth))  # fmt: skip
        ctx.h_form, ctx.residual, ctx.lengths = h_form, residual, lengths
        ctx.has = (bias is not None, depth_weight is not None, depth_bias is not None,
                   state is not None)  # fmt: skip
        # the inputs and the root's output (the h form's saved states) through autograd, which
        # checks that none was modified in place before the backward
        ctx.save_for_backward(x, weight, bias, depth_weight, depth_bias, child)
        return child, last, alpha, beta

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: Any, g_out: Tensor | None, g_last: Tensor | None, g_alpha: Tensor | None,
        g_beta: Tensor | None,
    ) -> tuple[Tensor | None, ...]:  # fmt: skip
        with torch.no_grad():
            grads = _InputTree._gradients(ctx, g_out, g_last, g_alpha, g_beta)
        return without_derivative(grads, "metagross_level (a whole tree as one node)",
                                  "Metagross with gates='input' and a linear base")

    @staticmethod
    def _gradients(
        ctx: Any, g_out: Tensor | None, g_last: Tensor | None, g_alpha: Tensor | None,
        g_beta: Tensor | None,
    ) -> tuple[Tensor | None, ...]:  # fmt: skip
        x, _weight, _bias, _dw, _db, root_out = ctx.saved_tensors
        W, Y = ctx.W, ctx.Y
        ext = backend.kernel_for("metagross", x.device)
        assert ext is not None
        B, T, H, L, I, rows = ctx.shape
        has_bias, has_dw, has_db, has_state = ctx.has
        nones: tuple[None, ...] = (None,) * 11
        if g_out is None and g_last is None and g_alpha is None and g_beta is None:
            return nones
        dY = ext.pooled_empty([B, T, Y.shape[-1]], x)
        dg = x.new_zeros(B, T, 2 * I) if I > 0 else None
        grad_out = None if g_out is None else g_out.contiguous()
        dres: Tensor | None = None
        dbias: list[Tensor] = []
        ds0: list[Tensor] = []
        for lv in ctx.levels:  # root first: each level's dchild is its children's grad_out
            level = lv["level"]
            saved = root_out if (level == 1 and ctx.h_form) else lv["saved"]
            sl, (c0, c1) = level_slice(level), level_columns(level, H)
            k = sl.stop - sl.start
            gl = None if g_last is None else g_last[:, sl.start * H : sl.stop * H].contiguous()
            _dP, dchild, dalpha, dbeta, dr, ds, db = ext.backward(
                grad_out, gl, lv["P"], lv["child"], lv["alpha"], lv["beta"], lv["s0"],
                ctx.lengths, saved, ctx.h_form, ctx.residual, lv["bias"],
                dY[..., c0:c1].view(B, T, 3, k, H), dres,
            )  # fmt: skip
            if ctx.residual:
                dres = dr
            dbias.append(db)
            ds0.append(ds)
            if lv["child"] is not None:
                assert dg is not None
                dg[..., sl] = dalpha.view(B, T, k)
                dg[..., I + sl.start : I + sl.stop] = dbeta.view(B, T, k)
                grad_out = dchild.view(B, T, 2 * k * H)
        need_x, need_w, need_b, need_dw, need_db, need_s = ctx.needs_input_grad[:6]
        d_depth_bias = None
        if dg is not None:
            g = ctx.g
            if g_alpha is not None:
                dg[..., :I] += g_alpha
            if g_beta is not None:
                dg[..., I:] += g_beta
            dlogits = dg * g * (1 - g)  # sigmoid's derivative
            if has_dw:
                dY[..., rows : rows + 2 * I] = dlogits
            if has_db and need_db:
                d_depth_bias = dlogits.sum((0, 1))
        used = rows + (2 * I if has_dw else 0)
        if dY.shape[-1] > used:
            dY[..., used:] = 0  # the padding's columns (zero rows of W: no gradient of their own)
        dY2 = dY.view(B * T, dY.shape[-1])  # explicit widths: a batch of 0 is valid
        dx = None
        if need_x:
            if dres is not None:  # dx = dres + dY W: one GEMM accumulating into dres
                dx = dres.view(B * T, H)
                ext.gemm_into(dx, dY2, W, True)
            else:
                dx = ext.gemm(dY2, W)
            dx = dx.view(x.shape)
        dweight = d_depth_weight = None
        if need_w or need_dw:
            dW = ext.gemm(dY2.t(), x.reshape(B * T, x.shape[-1]))
            dweight = dW[:rows] if need_w else None
            d_depth_weight = dW[rows : rows + 2 * I] if (has_dw and need_dw) else None
        d_bias = torch.cat(dbias) if (has_bias and need_b) else None
        d_state = torch.cat(ds0, dim=1) if (has_state and need_s) else None
        return (dx, dweight, d_bias, d_depth_weight, d_depth_bias, d_state) + (None,) * 5


def input_tree(
    x: Tensor, weight: Tensor, bias: Tensor | None, depth_weight: Tensor | None,
    depth_bias: Tensor | None, state: Tensor | None, lengths: Tensor | None, depth: int,
    hidden_size: int, h_form: bool, residual: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    """The tree's pass (module docstring) where :func:`applies`.

    Args:
        x: ``(B, T, D)``; with ``residual``, ``D`` equals ``hidden_size`` (the residual is
            ``x`` itself, eq 2-6).
        weight, bias: the linear base maps of every node ``(3 N H, D)``, ``(3 N H,)`` or None,
            in the level-major layout of :func:`ctrlrnn.ops.metagross_level.layout.base_index`.
        depth_weight, depth_bias: the token depth gates ``(2 I, D)``, ``(2 I,)`` (rows
            ``[alpha | beta]`` per internal node), or None for a tree of depth 1.
        state: the nodes' initial states ``(B, N H)`` in heap order, or None (zeros).
        lengths: ``(B,)`` lengths in ``[0, T]``, or None.

    Returns:
        ``(out (B, T, H), last (B, N H), alpha (B, T, I), beta (B, T, I))``.
    """
    if lengths is not None:
        lengths = check_lengths(lengths, x.shape[0], x.shape[1], allow_zero=True)
    if not records_graph(x, weight, bias, depth_weight, depth_bias, state):
        # no node to build (decoding): the same kernels, the base maps and the depth gates'
        # logits two products (no joint weight to make at every call, none to keep)
        ext = backend.kernel_for("metagross", x.device)
        assert ext is not None
        out, last, alpha, beta, _, _, _ = _levels_forward(
            ext, x.contiguous(), weight, bias, depth_weight, depth_bias, state, lengths, depth,
            hidden_size, bool(h_form), bool(residual), graph=False,
        )  # fmt: skip
        return out, last, alpha, beta
    out, last, alpha, beta = _InputTree.apply(
        x.contiguous(), weight, bias, depth_weight, depth_bias, state, lengths, depth,
        hidden_size, bool(h_form), bool(residual),
    )  # fmt: skip
    return out, last, alpha, beta
