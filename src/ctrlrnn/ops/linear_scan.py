"""The diagonal linear scan ``h_t = a_t * h_{t-1} + b_t``.

Public entry point :func:`linear_scan`. Where a compiled kernel exists (CPU extension, Triton on
CUDA) the work is done by the custom op ``ctrlrnn::linear_scan`` (registered with
:mod:`torch.library`, so it traces under ``torch.compile``; in eager mode its implementation and
autograd formula run through :mod:`ctrlrnn.ops.eager`, with less dispatch); elsewhere the reference
:func:`ctrlrnn.ops.linear_scan_ref.linear_scan_ref` runs, differentiated by autograd. The op's
backward is the single reverse pass

    d = g_t + carry;  db_t = d;  da_t = d * h_{t-1};  carry = d * a_t

started from the gradient of the final state, with ``carry`` at the end being ``dh_0``.
"""

# No `from __future__ import annotations`: torch 2.4's custom_op reads the annotations of the
# functions it registers as written, and cannot parse them as strings.

import torch
from torch import Tensor

from ctrlrnn.ops import scan_export
from ctrlrnn.ops.autocast import autocast_inputs
from ctrlrnn.ops.backend import has_kernel, kernel_for
from ctrlrnn.ops.double_backward import forbid_double_backward
from ctrlrnn.ops.eager import CompiledOp, backward_of
from ctrlrnn.ops.linear_scan_ref import linear_scan_ref
from ctrlrnn.ops.padding import reverse_padded
from ctrlrnn.ops.validation import check_flag, check_lengths, check_same


def _reference_forward(
    a: Tensor, b: Tensor, h0: Tensor | None, lengths: Tensor | None, reverse: bool
) -> tuple[Tensor, Tensor]:
    with torch.no_grad():
        out, last = linear_scan_ref(a, b, h0, reverse=reverse, lengths=lengths, return_last=True)
    return out.contiguous(), last.contiguous()


def _linear_scan_impl(
    a: Tensor, b: Tensor, h0: Tensor | None, lengths: Tensor | None, reverse: bool
) -> tuple[Tensor, Tensor]:
    ext = kernel_for("scan", a.device)
    if ext is None:
        return _reference_forward(a, b, h0, lengths, reverse)
    out, last = ext.linear_scan_forward(a, b, h0, lengths, reverse)
    return out, last


_linear_scan_op = torch.library.custom_op("ctrlrnn::linear_scan", mutates_args=())(
    _linear_scan_impl
)


@_linear_scan_op.register_fake
def _(a: Tensor, b: Tensor, h0: Tensor | None, lengths: Tensor | None, reverse: bool):
    return torch.empty_like(a), a.new_empty(a.shape[0], a.shape[2])


def _linear_scan_backward_impl(
    grad_out: Tensor | None,
    grad_last: Tensor | None,
    a: Tensor,
    out: Tensor,
    h0: Tensor | None,
    lengths: Tensor | None,
    reverse: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    ext = kernel_for("scan", a.device)
    if ext is not None:
        da, db, dh0 = ext.linear_scan_backward(grad_out, grad_last, a, out, h0, lengths, reverse)
        return da, db, dh0
    return _reference_backward(grad_out, grad_last, a, out, h0, lengths, reverse)


_linear_scan_backward_op = torch.library.custom_op(
    "ctrlrnn::linear_scan_backward", mutates_args=()
)(_linear_scan_backward_impl)


def _reference_backward(
    grad_out: Tensor | None,
    grad_last: Tensor | None,
    a: Tensor,
    out: Tensor,
    h0: Tensor | None,
    lengths: Tensor | None,
    reverse: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """The reverse pass of the module docstring, one Python step per time step."""
    dtype = a.dtype
    acc = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    batch, steps, channels = a.shape

    def fwd_order(x: Tensor) -> Tensor:
        x = x.to(acc)
        return reverse_padded(x, lengths) if reverse else x

    a_, h_ = fwd_order(a), fwd_order(out)
    g_ = fwd_order(grad_out) if grad_out is not None else torch.zeros_like(a_)
    h_init = h0.to(acc) if h0 is not None else a_.new_zeros(batch, channels)
    carry = grad_last.to(acc) if grad_last is not None else a_.new_zeros(batch, channels)
    da, db = torch.zeros_like(a_), torch.zeros_like(a_)
    for t in range(steps - 1, -1, -1):
        prev = h_[:, t - 1] if t > 0 else h_init
        d = g_[:, t] + carry
        if lengths is None:
            valid = torch.ones(batch, 1, dtype=torch.bool, device=a.device)
        else:
            valid = (lengths.to(a.device) > t).unsqueeze(1)
        db[:, t] = torch.where(valid, d, 0.0)
        da[:, t] = torch.where(valid, d * prev, 0.0)
        carry = torch.where(valid, d * a_[:, t], carry)
    if reverse:
        da, db = reverse_padded(da, lengths), reverse_padded(db, lengths)
    return da.to(dtype), db.to(dtype), carry.to(dtype)


@_linear_scan_backward_op.register_fake
def _(grad_out, grad_last, a, out, h0, lengths, reverse):
    return torch.empty_like(a), torch.empty_like(a), a.new_empty(a.shape[0], a.shape[2])


def _setup_context(ctx, inputs, output) -> None:
    a, _b, h0, lengths, reverse = inputs
    out, _last = output
    ctx.save_for_backward(a, out, h0, lengths)
    ctx.reverse = reverse
    ctx.has_h0 = h0 is not None
    # an unused output's gradient reaches the backward as None, never as a tensor of zeros
    # made for it (an allocation and a fill per call; the kernels take None)
    ctx.set_materialize_grads(False)


def _backward(ctx, grad_out: Tensor | None, grad_last: Tensor | None):
    a, out, h0, lengths = ctx.saved_tensors
    if grad_out is not None:
        grad_out = grad_out.contiguous()
    if grad_last is not None:
        grad_last = grad_last.contiguous()
    bwd = backward_of(_linear_scan_backward_op, _linear_scan_backward_impl, grad_out, grad_last, a)
    da, db, dh0 = bwd(grad_out, grad_last, a, out, h0, lengths, ctx.reverse)
    return da, db, (dh0 if ctx.has_h0 else None), None, None


_linear_scan = CompiledOp(
    "linear_scan", _linear_scan_op, _linear_scan_impl, _setup_context, _backward
)
forbid_double_backward(
    _linear_scan_backward_op, "linear_scan", "RCRN, CARNN (i, s) and METAGROSS on CUDA"
)


def linear_scan(
    a: Tensor,
    b: Tensor,
    h0: Tensor | None = None,
    *,
    reverse: bool = False,
    lengths: Tensor | None = None,
    return_last: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Compute ``h_t = a_t * h_{t-1} + b_t`` over time, elementwise over batch and channels.

    Args:
        a, b: batch-first ``(B, T, C)`` tensors of the same floating dtype and device. fp16/bf16
            inputs are accumulated in fp32.
        h0: optional initial state ``(B, C)`` (zeros when omitted).
        reverse: run each sequence from its last valid step back to step 0.
        lengths: optional ``(B,)`` integer lengths in ``[0, T]``: steps past a sequence's length
            leave its state unchanged and output zeros.
        return_last: also return the final state ``(B, C)`` (the state after the last valid
            step in processing order; ``h0`` for an empty sequence).

    Returns:
        ``h`` of shape ``(B, T, C)``, or ``(h, h_last)`` when ``return_last``.
    """
    if isinstance(a, Tensor):
        a, b, h0 = autocast_inputs(a.device, a, b, h0)
    check_same("a", a, "b", b)
    check_flag("reverse", reverse)
    check_flag("return_last", return_last)
    if a.dim() != 3:
        raise ValueError(f"a: expected a (B, T, C) tensor, got shape {tuple(a.shape)}")
    if not a.is_floating_point():
        raise ValueError(f"a: expected a floating dtype, got {a.dtype}")
    batch, steps, channels = a.shape
    if h0 is not None:
        if not isinstance(h0, Tensor):
            raise ValueError(
                f"h0: expected a tensor of shape {(batch, channels)}, got {type(h0).__name__}"
            )
        if h0.shape != (batch, channels):
            raise ValueError(f"h0: expected shape {(batch, channels)}, got {tuple(h0.shape)}")
        if h0.dtype != a.dtype or h0.device != a.device:
            raise ValueError(
                f"h0: expected dtype {a.dtype} on {a.device}, got {h0.dtype} on {h0.device}"
            )
        h0 = h0.contiguous()
    if lengths is not None:
        lengths = check_lengths(lengths, batch, steps, allow_zero=True)
        if a.device.type != "cpu":
            lengths = lengths.to(a.device)
    if scan_export.active():  # ONNX export: one scan of symbolic length (ops/scan_export.py)
        out, last = scan_export.linear_scan(a, b, h0, lengths, reverse)
    elif has_kernel("scan", a.device):
        out, last = _linear_scan(a.contiguous(), b.contiguous(), h0, lengths, reverse)
    else:  # the readable reference, differentiated by autograd
        out, last = linear_scan_ref(a, b, h0, reverse=reverse, lengths=lengths, return_last=True)
    return (out, last) if return_last else out
