"""The diagonal linear scan ``h_t = a_t * h_{t-1} + b_t``.

Public entry point :func:`linear_scan`. Where a compiled kernel exists (CPU extension, Triton on
CUDA) the work is done by the custom op ``ctrlrnn::linear_scan``, one op with both kernels
registered on it (:mod:`ctrlrnn.ops.kernel_op`; it traces under ``torch.compile``, and in eager
mode its kernels and autograd formula run through :mod:`ctrlrnn.ops.compiled_op`, with less
dispatch); elsewhere the reference
:func:`ctrlrnn.ops.linear_scan.reference.linear_scan_ref` runs, differentiated by autograd. The op's
backward is the single reverse pass

    d = g_t + carry;  db_t = d;  da_t = d * h_{t-1};  carry = d * a_t

started from the gradient of the final state, with ``carry`` at the end being ``dh_0``
(:func:`ctrlrnn.ops.linear_scan.reference.linear_scan_ref_backward` writes it out).
"""

# No `from __future__ import annotations`: torch 2.4's custom_op reads the annotations of the
# functions it registers as written, and cannot parse them as strings.

import torch
from torch import Tensor

from ctrlrnn.ops import backend, scan_export
from ctrlrnn.ops.autocast import autocast_inputs
from ctrlrnn.ops.kernel_op import Kernel, KernelOp
from ctrlrnn.ops.linear_scan.reference import linear_scan_ref, linear_scan_ref_backward
from ctrlrnn.ops.validation import check_flag, check_lengths, check_same

__all__ = ["linear_scan", "linear_scan_op"]


def _reference_forward(
    a: Tensor, b: Tensor, h0: Tensor | None, lengths: Tensor | None, reverse: bool
) -> tuple[Tensor, Tensor]:
    """The op without a kernel: :func:`linear_scan_ref`, not recorded by autograd."""
    with torch.no_grad():
        out, last = linear_scan_ref(a, b, h0, reverse=reverse, lengths=lengths, return_last=True)
    return out.contiguous(), last.contiguous()


def _fake_forward(a, b, h0, lengths, reverse):
    return torch.empty_like(a), a.new_empty(a.shape[0], a.shape[2])


def _fake_backward(grad_out, grad_last, a, out, h0, lengths, reverse):
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
    da, db, dh0 = _linear_scan.run_backward(grad_out, grad_last, a, out, h0, lengths, ctx.reverse)
    return da, db, (dh0 if ctx.has_h0 else None), None, None


_linear_scan = KernelOp(
    "linear_scan",
    "scan",
    Kernel("linear_scan_forward", _reference_forward, _fake_forward),
    Kernel("linear_scan_backward", linear_scan_ref_backward, _fake_backward),
    setup_context=_setup_context,
    backward_fn=_backward,
    used_by="RCRN, CARNN (i, s) and METAGROSS on CUDA",
)
#: The scan's custom ops, for the ops composed with it (the METAGROSS level's fallback).
linear_scan_op = _linear_scan


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
        a: the decays ``a_t``, a batch-first ``(B, T, C)`` floating tensor. fp16/bf16 inputs
            are accumulated in fp32.
        b: the inputs ``b_t``, of the shape, dtype and device of ``a``.
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
    route = backend.path("scan", a.device)
    if route == backend.EXPORT:  # ONNX export: one scan of symbolic length (ops/scan_export.py)
        out, last = scan_export.linear_scan(a, b, h0, lengths, reverse)
    elif route == backend.KERNEL:
        out, last = _linear_scan(a.contiguous(), b.contiguous(), h0, lengths, reverse)
    else:  # the readable reference, differentiated by autograd
        out, last = linear_scan_ref(a, b, h0, reverse=reverse, lengths=lengths, return_last=True)
    return (out, last) if return_last else out
