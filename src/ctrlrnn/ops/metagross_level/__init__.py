"""One METAGROSS tree level, gates and scan fused (METAGROSS paper eq 2-1..2-6).

For the ``k`` units of one level, from their base pre-activations ``P = (F^F, F^O, F^Z)``
``(B, T, 3, k, H)`` (plus, when given, their biases ``(3*k*H,)``: ``F = W x_t + b``, section
2.2, with ``P = W x_t`` from the GEMM and ``b`` added inside the kernels), the outputs of their
children ``(M^F, M^O)`` ``(B, T, k, 2, H)``, the depth gates ``alpha``, ``beta``
``(B, T, k, 1)`` and the residual ``x`` ``(B, T, 1, H)``::

    f = sig(alpha M^F + (1 - alpha) F^F)          (eq 2-1; sig(F^F) at the leaves)
    o = sig(beta  M^O + (1 - beta)  F^O)          (eq 2-2; sig(F^O) at the leaves)
    z = tanh(F^Z)                                 (eq 2-3)
    "h" form (as printed, eq 2-4..2-6):  s_t = o (1 - f) s_{t-1} + o f z (+ x_t),  out_t = s_t
    "c" form (c_{t-1} carried):          s_t = (1 - f) s_{t-1} + f z,  out_t = o s_t (+ x_t)

that is the diagonal linear scan ``s_t = a_t s_{t-1} + b_t`` of
:mod:`ctrlrnn.ops.linear_scan` with ``a, b`` made from the gates. :func:`metagross_level`
returns ``(out, s_last)``; past a sequence's length the state stays unchanged and ``out`` is
zero (for both forms, residual included).

On CPU the work is the custom op ``ctrlrnn::metagross_level`` (registered with
:mod:`torch.library`, so it traces under ``torch.compile``) running the compiled kernel of
``metagross_level.cpp``: one pass over time per (batch, channel block) that never writes
``a``, ``b`` or the gates to memory, and a backward ``ctrlrnn::metagross_level_backward`` that
recomputes ``f, o, z`` and runs the scan's reverse recurrence together with the gate gradients
in one reverse pass. CUDA tensors run the same two custom ops on the Triton kernels of
:mod:`ctrlrnn.ops.metagross_level.triton_kernels`, registered on them as their CUDA kernels (same
arguments, same fusion; :mod:`ctrlrnn.ops.kernel_op`; the module chosen by
:func:`ctrlrnn.ops.backend.kernel_for`). ``CTRLRNN_BACKEND=reference``, CUDA without Triton and
machines where the extension cannot be built run :func:`metagross_level_reference`, the
composition of :func:`ctrlrnn.ops.metagross_level.gates.level_gates` and
:func:`ctrlrnn.ops.linear_scan.linear_scan`
(the custom ops also fall back to that composition by themselves, forward and backward, where
a graph traced with the extension runs without it).

A level's base pre-activations ``W x`` (section 2.2) are computed by
:func:`ctrlrnn.ops.cached_linear.cached_linear`, into a block of the output cache, so that the
largest tensor of a step does not page-fault afresh every step; their bias ``b`` is the
``bias`` argument here, added as the kernels read ``P`` and its gradient summed as they write
``dP``. A GEMM with its bias would first fill its output with the bias (a pass writing the
largest tensor of the step), and the bias's gradient would be a separate sum over the largest
gradient.
"""

# No `from __future__ import annotations`: torch 2.4's custom_op reads the annotations of the
# functions it registers as written, and cannot parse them as strings.

from typing import Any

import torch
from torch import Tensor

from ctrlrnn.ops import backend
from ctrlrnn.ops.autocast import autocast_inputs
from ctrlrnn.ops.kernel_op import Kernel, KernelOp
from ctrlrnn.ops.linear_scan import linear_scan_op
from ctrlrnn.ops.metagross_level.gates import _backward_recompute, _forward_math
from ctrlrnn.ops.metagross_level.reference import metagross_level_reference
from ctrlrnn.ops.padding import length_mask
from ctrlrnn.ops.validation import check_lengths

__all__ = ["metagross_level", "metagross_level_reference"]


# ------------------------------------------------------------------ the compiled op


def _reference_forward(
    P: Tensor, child: Tensor | None, alpha: Tensor | None, beta: Tensor | None,
    res: Tensor | None, s0: Tensor | None, lengths: Tensor | None, h_form: bool,
    bias: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """The op without a kernel -> ``(out, c, s_last)``; ``c`` (the carried states, saved for
    backward) is empty for the ``"h"`` form, whose states are ``out`` itself."""
    with torch.no_grad():
        out, s, last = metagross_level_reference(
            P, child, alpha, beta, res, s0, lengths, h_form, bias
        )
    c = P.new_empty(0) if h_form else s.contiguous()
    return out.contiguous(), c, last.contiguous()


def _fake_forward(P, child, alpha, beta, res, s0, lengths, h_form, bias=None):
    B, T, _, k, H = P.shape
    c = P.new_empty(0) if h_form else P.new_empty(B, T, k * H)
    return P.new_empty(B, T, k * H), c, P.new_empty(B, k * H)


def _reference_backward(
    grad_out: Tensor | None, grad_last: Tensor | None, P: Tensor, child: Tensor | None,
    alpha: Tensor | None, beta: Tensor | None, s0: Tensor | None, lengths: Tensor | None,
    saved: Tensor, h_form: bool, has_res: bool, bias: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    """The gradients of :func:`metagross_level_reference`, written out (a custom op's body runs
    below autograd): the gates' forward of :mod:`ctrlrnn.ops.metagross_level.gates`, the scan's
    reverse pass (``ctrlrnn::linear_scan_backward``), then the gates' backward; the bias's
    gradient is ``dP`` summed over the batch and the steps."""
    B, T, _, k, H = P.shape
    if bias is not None:
        P = P + bias.view(3, k, H)
    a, _b, o, _f, _z = _forward_math(P, child, alpha, beta, None, h_form)  # res only shifts b
    g_s = grad_out  # gradient reaching the scan's states
    g_o: Tensor | None = None
    if grad_out is not None and not h_form:  # out = o s (+ x), zero past the length
        if lengths is not None:
            mask = length_mask(lengths.to(P.device), T).unsqueeze(-1)
            grad_out = grad_out * mask.to(grad_out)
        g_o = (grad_out * saved).view(B, T, k, H)
        g_s = (grad_out * o.reshape(B, T, k * H)).contiguous()
    da, db, ds0 = linear_scan_op.backward_op(
        g_s, grad_last, a.reshape(B, T, k * H).contiguous(), saved, s0, lengths, False
    )
    dP, dchild, dalpha, dbeta, dres = _backward_recompute(
        P, child, alpha, beta, da.view(B, T, k, H), db.view(B, T, k, H), g_o, h_form, has_res
    )  # fmt: skip
    if has_res and not h_form:  # the residual is added to every unit's output
        dres = (
            grad_out.view(B, T, k, H).sum(2, keepdim=True)
            if grad_out is not None
            else P.new_zeros(B, T, 1, H)
        )

    def given(x):  # a fresh empty tensor each, so that no two returns alias
        return P.new_empty(0) if x is None else x

    dbias = None if bias is None else dP.sum((0, 1)).reshape(3 * k * H)
    return dP, given(dchild), given(dalpha), given(dbeta), given(dres), ds0, given(dbias)


def _fake_backward(grad_out, grad_last, P, child, alpha, beta, s0, lengths, saved, h_form, has_res,
                   bias=None):  # fmt: skip
    B, T, _, k, H = P.shape
    return (
        P.new_empty(B, T, 3, k, H),
        P.new_empty(0) if child is None else P.new_empty(child.shape),
        P.new_empty(0) if alpha is None else P.new_empty(alpha.shape),
        P.new_empty(0) if beta is None else P.new_empty(beta.shape),
        P.new_empty(B, T, 1, H) if has_res else P.new_empty(0),
        P.new_empty(B, k * H),
        P.new_empty(0) if bias is None else P.new_empty(3 * k * H),
    )


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, ...]) -> None:
    P, child, alpha, beta, res, s0, lengths, h_form, bias = inputs
    out, c, _last = output
    ctx.save_for_backward(P, child, alpha, beta, s0, lengths, out if h_form else c, bias)
    ctx.h_form = h_form
    ctx.has_res = res is not None
    ctx.mark_non_differentiable(c)
    ctx.set_materialize_grads(False)  # an unused output's gradient stays None, never zeros


def _backward(ctx: Any, grad_out: Tensor | None, _grad_c: Tensor | None,
              grad_last: Tensor | None) -> tuple[Tensor | None, ...]:  # fmt: skip
    P, child, alpha, beta, s0, lengths, saved, bias = ctx.saved_tensors
    if grad_out is None and grad_last is None:
        return (None,) * 9
    if grad_out is not None:
        grad_out = grad_out.contiguous()
    if grad_last is not None:
        grad_last = grad_last.contiguous()
    dP, dchild, dalpha, dbeta, dres, ds0, dbias = _level.run_backward(
        grad_out, grad_last, P, child, alpha, beta, s0, lengths, saved, ctx.h_form, ctx.has_res,
        bias,
    )  # fmt: skip
    return (
        dP,
        dchild if child is not None else None,
        dalpha if alpha is not None else None,
        dbeta if beta is not None else None,
        dres if ctx.has_res else None,
        ds0 if s0 is not None else None,
        None,
        None,
        dbias if bias is not None else None,
    )


_level = KernelOp(
    "metagross_level",
    "metagross",
    Kernel("forward", _reference_forward, _fake_forward),
    Kernel("backward", _reference_backward, _fake_backward),
    setup_context=_setup_context,
    backward_fn=_backward,
    used_by="Metagross",
)


# ------------------------------------------------------------------ public entry point


def _check_shape(name: str, x: Tensor | None, shape: tuple[int, ...], P: Tensor) -> None:
    if x is None:
        return
    if not isinstance(x, Tensor):
        raise ValueError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    if tuple(x.shape) != shape:
        raise ValueError(f"{name}: expected shape {shape}, got {tuple(x.shape)}")
    if x.dtype != P.dtype or x.device != P.device:
        raise ValueError(f"{name}: expected dtype {P.dtype} on {P.device}, got {x.dtype} on "
                         f"{x.device}")  # fmt: skip


def _packed_rows(P: Tensor) -> Tensor:
    """``P`` itself when its last three dims are packed ``(3, k, H)`` rows (any batch and step
    strides, e.g. a column slice of a GEMM output), else a contiguous copy."""
    _, _, _, k, H = P.shape
    ok = P.stride(2) == k * H and (k <= 1 or P.stride(3) == H) and (H <= 1 or P.stride(4) == 1)
    return P if ok else P.contiguous()


def _contiguous(x: Tensor | None) -> Tensor | None:
    return None if x is None else x.contiguous()


def metagross_level(
    P: Tensor, child: Tensor | None, alpha: Tensor | None, beta: Tensor | None,
    res: Tensor | None, s0: Tensor | None, lengths: Tensor | None, h_form: bool,
    bias: Tensor | None = None,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """Run the ``k`` units of one METAGROSS level over time (module docstring, eq 2-1..2-6).

    Args:
        P: base pre-activations ``(B, T, 3, k, H)``, gates ``[F | O | Z]`` each over the ``k``
            units (the level-major layout of :func:`ctrlrnn.ops.metagross_level.layout.base_index`).
        child: the children's outputs ``(B, T, k, 2, H)`` (``[M^F, M^O]`` per unit), or None at
            the leaves (then ``alpha`` and ``beta`` must be None too).
        alpha, beta: depth gates ``(B, T, k, 1)`` in ``[0, 1]`` (section 2.1), or None.
        res: residual ``(B, T, 1, H)`` added to every unit's output (eq 2-6), or None.
        s0: initial carried states ``(B, k*H)`` (``h`` or ``c`` per form), zeros when None.
        lengths: optional ``(B,)`` integer lengths in ``[0, T]``.
        h_form: True for the printed form (the carried state is the output ``h``), False for
            the ``c`` form.
        bias: the base maps' biases ``(3*k*H,)`` in ``P``'s row layout (``[F | O | Z]`` of the
            ``k`` units), added to ``P`` (section 2.2: ``F = W x_t + b`` with ``P = W x_t``),
            or None.

    Returns:
        ``(out, s_last)``: the units' outputs ``(B, T, k*H)``, zero past each length, and their
        final carried states ``(B, k*H)`` (``s0`` for an empty sequence). Differentiable
        w.r.t. every tensor argument but ``lengths``.
    """
    if isinstance(P, Tensor):
        P, child, alpha, beta, res, s0, bias = autocast_inputs(
            P.device, P, child, alpha, beta, res, s0, bias
        )
    if not isinstance(P, Tensor) or P.dim() != 5 or P.shape[2] != 3:
        raise ValueError("P: expected a (B, T, 3, k, H) tensor")
    if not P.is_floating_point():
        raise ValueError(f"P: expected a floating dtype, got {P.dtype}")
    B, T, _, k, H = P.shape
    if (child is None) != (alpha is None) or (child is None) != (beta is None):
        raise ValueError("child: child, alpha and beta must be given together (or all None)")
    _check_shape("child", child, (B, T, k, 2, H), P)
    _check_shape("alpha", alpha, (B, T, k, 1), P)
    _check_shape("beta", beta, (B, T, k, 1), P)
    _check_shape("res", res, (B, T, 1, H), P)
    _check_shape("s0", s0, (B, k * H), P)
    _check_shape("bias", bias, (3 * k * H,), P)
    # ONNX export (ops/scan_export.py) runs the reference composition: its scan is one of
    # symbolic length there
    if backend.path("metagross", P.device) != backend.KERNEL:
        out, _s, last = metagross_level_reference(
            P, child, alpha, beta, res, s0, lengths, h_form, bias
        )
        return out, last
    if lengths is not None:
        lengths = check_lengths(lengths, B, T, allow_zero=True)
    out, _c, last = _level(
        _packed_rows(P), _contiguous(child), _contiguous(alpha), _contiguous(beta),
        _contiguous(res), _contiguous(s0), lengths, bool(h_form), _contiguous(bias),
    )  # fmt: skip
    return out, last
