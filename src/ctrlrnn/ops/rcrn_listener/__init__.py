"""The RCRN listener (RCRN paper eq 15-16) fused: gates, scan and output in one op.

With ``a = sigmoid(h1)`` (the forget-gate controller), ``h3`` the listener base and ``h2`` the
output-gate controller, over batch-first ``(B, T, C)`` tensors:

    c4_t = a_t * c4_{t-1} + (1 - a_t) * h3_t      (eq 15)
    h4_t = gate(h2_t) * c4_t                      (eq 16; gate = sigmoid, or the identity)

Channels ``[0, split)`` run forward in time, channels ``[split, C)`` backwards from each
sequence's own last valid step, so both directions of a bidirectional layer (their inputs in
forward time, ``[forward | backward]`` as torch's bidirectional LSTM lays them out) go in one
call. Composed of public ops, the listener is seven passes over memory forward (sigmoid,
``(1 - a) h3``, the scan, sigmoid, the product, the concatenation of the directions, and a
dense copy of each controller output) and more backward; the compiled kernels read ``h1``,
``h2``, ``h3`` once, in whatever batch and time strides they come (only the channel stride must
be 1: torch's LSTM gives its batch-first outputs as transposed views), write ``h4`` and the
state sequence, and in one reverse pass the three gradients, in the inputs' strides.

The custom ops ``ctrlrnn::rcrn_listener`` and ``ctrlrnn::rcrn_listener_backward`` carry the CPU
extension's kernel (``rcrn_listener.cpp`` beside it) and the Triton kernel
(:mod:`ctrlrnn.ops.rcrn_listener.triton_kernels`) (:mod:`ctrlrnn.ops.kernel_op`); where neither
exists :func:`rcrn_listener` runs
:func:`~ctrlrnn.ops.rcrn_listener.reference.rcrn_listener_ref` through autograd, and under an
ONNX export the same equations on :func:`ctrlrnn.linear_scan`.
"""

# No `from __future__ import annotations`: torch 2.4's custom_op reads the annotations of the
# functions it registers as written, and cannot parse them as strings.

import torch
from torch import Tensor

from ctrlrnn.ops import backend
from ctrlrnn.ops.autocast import autocast_inputs
from ctrlrnn.ops.kernel_op import Kernel, KernelOp
from ctrlrnn.ops.linear_scan import linear_scan
from ctrlrnn.ops.linear_scan.reference import linear_scan_ref
from ctrlrnn.ops.rcrn_listener.reference import (
    OUTPUT_GATES,
    rcrn_listener_ref,
    rcrn_listener_ref_backward,
)
from ctrlrnn.ops.validation import check_lengths, check_same

__all__ = ["OUTPUT_GATES", "rcrn_listener", "rcrn_listener_ref"]


def _reference_forward(
    h1: Tensor, h2: Tensor, h3: Tensor, c0: Tensor | None, lengths: Tensor | None, split: int,
    sigmoid_gate: bool,
) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """The op without a kernel: :func:`rcrn_listener_ref`, not recorded by autograd."""
    gate = "sigmoid" if sigmoid_gate else "identity"
    with torch.no_grad():
        h4, c4, last = rcrn_listener_ref(h1, h2, h3, c0, lengths=lengths, output_gate=gate,
                                         split=split)
    return h4.contiguous(), c4.contiguous(), last.contiguous()


def _fake_forward(h1, h2, h3, c0, lengths, split, sigmoid_gate):
    B, T, C = h1.shape
    return h1.new_empty(B, T, C), h1.new_empty(B, T, C), h1.new_empty(B, C)


def _fake_backward(grad_out, grad_last, h1, h2, h3, c4, c0, lengths, split, sigmoid_gate):
    return (torch.empty_like(h1), torch.empty_like(h2), torch.empty_like(h3),
            h1.new_empty(h1.shape[0], h1.shape[2]))


def _setup_context(ctx, inputs, output) -> None:
    h1, h2, h3, c0, lengths, split, sigmoid_gate = inputs
    _h4, c4, _last = output
    ctx.save_for_backward(h1, h2, h3, c4, c0, lengths)
    ctx.split = split
    ctx.sigmoid_gate = sigmoid_gate
    ctx.has_c0 = c0 is not None
    # c4, the state sequence, is the backward's saved state: rcrn_listener does not return it
    ctx.mark_non_differentiable(c4)
    ctx.set_materialize_grads(False)


def _backward(ctx, grad_h4, _grad_c4, grad_last):
    h1, h2, h3, c4, c0, lengths = ctx.saved_tensors
    if grad_last is not None:
        grad_last = grad_last.contiguous()
    if grad_h4 is not None:
        grad_h4 = _unit_channel_stride(grad_h4)
    d1, d2, d3, dc0 = _rcrn_listener.run_backward(
        grad_h4, grad_last, h1, h2, h3, c4, c0, lengths, ctx.split, ctx.sigmoid_gate)
    return d1, d2, d3, (dc0 if ctx.has_c0 else None), None, None, None


_rcrn_listener = KernelOp(
    "rcrn_listener",
    "scan",
    Kernel("rcrn_listener_forward", _reference_forward, _fake_forward),
    Kernel("rcrn_listener_backward", rcrn_listener_ref_backward, _fake_backward),
    setup_context=_setup_context,
    backward_fn=_backward,
    used_by="RCRN",
)


def _unit_channel_stride(x: Tensor) -> Tensor:
    return x if x.shape[2] <= 1 or x.stride(2) == 1 or x.numel() == 0 else x.contiguous()


def rcrn_listener(
    h1: Tensor,
    h2: Tensor,
    h3: Tensor,
    c0: Tensor | None = None,
    *,
    lengths: Tensor | None = None,
    output_gate: str = "sigmoid",
    split: int | None = None,
) -> tuple[Tensor, Tensor]:
    """RCRN eq 15-16 over all channels at once (see the module docstring).

    Args:
        h1: ``(B, T, C)`` forget-gate controller output (``a = sigmoid(h1)``).
        h2: ``(B, T, C)`` output-gate controller output.
        h3: ``(B, T, C)`` listener base output.
        c0: optional initial listener state ``(B, C)`` (zeros when omitted).
        lengths: optional ``(B,)`` lengths in ``[0, T]``: steps past a length output zeros and
            leave the state unchanged.
        output_gate: ``"sigmoid"`` (the text of eq 16) or ``"identity"`` (eq 16 as printed).
        split: channels ``[split, C)`` run backwards in time (default ``C``: none do).

    Returns:
        ``(h4, c4_last)``: ``(B, T, C)`` and the final state ``(B, C)`` (after the last valid
        step in each channel's processing order; ``c0`` for an empty sequence).
    """
    if isinstance(h1, Tensor):
        h1, h2, h3, c0 = autocast_inputs(h1.device, h1, h2, h3, c0)
    check_same("h1", h1, "h2", h2)
    check_same("h1", h1, "h3", h3)
    if h1.dim() != 3 or not h1.is_floating_point():
        raise ValueError(f"h1: expected a floating (B, T, C) tensor, got {h1.dtype} of shape "
                         f"{tuple(h1.shape)}")
    B, T, C = h1.shape
    if output_gate not in OUTPUT_GATES:
        raise ValueError(f"output_gate: expected one of {OUTPUT_GATES}, got {output_gate!r}")
    split = C if split is None else split
    if isinstance(split, bool) or not isinstance(split, int) or not 0 <= split <= C:
        raise ValueError(f"split: expected an integer in [0, {C}], got {split!r}")
    if c0 is not None:
        if not isinstance(c0, Tensor) or c0.shape != (B, C):
            got = tuple(c0.shape) if isinstance(c0, Tensor) else type(c0).__name__
            raise ValueError(f"c0: expected a tensor of shape {(B, C)}, got {got}")
        if c0.dtype != h1.dtype or c0.device != h1.device:
            raise ValueError(f"c0: expected dtype {h1.dtype} on {h1.device}, got {c0.dtype} on "
                             f"{c0.device}")
        c0 = c0.contiguous()
    if lengths is not None:
        lengths = check_lengths(lengths, B, T, allow_zero=True)
        if h1.device.type != "cpu":
            lengths = lengths.to(h1.device)
    route = backend.path("scan", h1.device)
    if route == backend.KERNEL:
        h4, _c4, last = _rcrn_listener(
            _unit_channel_stride(h1), _unit_channel_stride(h2), _unit_channel_stride(h3), c0,
            lengths, split, output_gate == "sigmoid")
        return h4, last
    # the readable reference through autograd, or (ONNX export) the public scan, which exports
    scan = linear_scan if route == backend.EXPORT else linear_scan_ref
    h4, _c4, last = rcrn_listener_ref(h1, h2, h3, c0, lengths=lengths, output_gate=output_gate,
                                      split=split, scan=scan)
    return h4, last
