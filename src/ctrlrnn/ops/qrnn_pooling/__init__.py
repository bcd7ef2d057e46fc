"""QRNN pooling (QRNN paper eq 3-5) fused with the gate activations (eq 1-2) and zoneout (eq 6).

Input: the raw pre-activations of the convolution, ``gates`` of shape ``(B, T, G*H)`` laid out
``[Z | F | O | I]`` (``G`` = 2 for f-, 3 for fo-, 4 for ifo-pooling). With
``z = tanh(Z)``, ``f = sigmoid(F)``, ``o = sigmoid(O)``, ``i = sigmoid(I)``:

* f-pooling (eq 3):   ``c_t = f_t * c_{t-1} + (1 - f_t) * z_t``,  ``h_t = c_t``
* fo-pooling (eq 4):  ``c_t = f_t * c_{t-1} + (1 - f_t) * z_t``,  ``h_t = o_t * c_t``
* ifo-pooling (eq 5): ``c_t = f_t * c_{t-1} + i_t * z_t``,        ``h_t = o_t * c_t``

Zoneout (eq 6) is ``F = 1 - dropout(1 - sigmoid(F))`` *without* rescaling: ``1 - f`` is
multiplied by a 0/1 keep mask in training (``keep``), and by its expectation ``1 - p``
(``keep_scale``) in evaluation. Note the order: the gate ``f`` multiplies the *previous* cell, as
the paper writes it; the public CUDA kernel of the authors computes ``f*z + (1-f)*c``, the
reverse, which ctrlrnn does not follow.

The compiled kernel reads the pre-activations once and writes ``h`` and ``c``; its backward
recomputes the activations and returns the gradient of the pre-activations in one reverse pass.
Given the convolution's ``bias`` (eq 1-2: ``W x + b``), it adds it to the pre-activations as it
reads them and sums its gradient as it writes theirs, so that the layer's GEMM writes ``W x``
alone: a GEMM with a bias first fills its output with it (a pass writing the largest tensor of
the layer), and the bias's gradient would be one more pass summing the largest gradient.
Both are the custom ops ``ctrlrnn::qrnn_pooling`` and ``ctrlrnn::qrnn_pooling_backward``, each
with the CPU extension's kernel and the Triton kernel registered on it
(:mod:`ctrlrnn.ops.kernel_op`). Where no compiled kernel exists, :func:`qrnn_pooling` runs
:func:`ctrlrnn.ops.qrnn_pooling.reference.qrnn_pooling_ref` through autograd instead.
"""

# No `from __future__ import annotations`: torch 2.4's custom_op reads the annotations of the
# functions it registers as written, and cannot parse them as strings.

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from ctrlrnn.ops import backend, scan_export
from ctrlrnn.ops.autocast import autocast_inputs
from ctrlrnn.ops.kernel_op import Kernel, KernelOp
from ctrlrnn.ops.qrnn_pooling.reference import (
    GATES_PER_MODE,
    POOLING_MODES,
    gate_activations,
    qrnn_pooling_ref,
    qrnn_pooling_ref_backward,
    zoneout_factor,
)

__all__ = [
    "GATES_PER_MODE",
    "POOLING_MODES",
    "fuses_bias",
    "gate_activations",
    "pooling_step",
    "qrnn_pooling",
    "qrnn_pooling_ref",
    "zoneout_factor",
]


def _reference_forward(
    gates: Tensor,
    c0: Tensor | None,
    keep: Tensor | None,
    keep_scale: float,
    lengths: Tensor | None,
    mode: int,
    bias: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """The op without a kernel: :func:`qrnn_pooling_ref`, not recorded by autograd."""
    pooling = list(POOLING_MODES)[mode]
    if bias is not None:
        gates = gates + bias
    with torch.no_grad():
        h, c, last = qrnn_pooling_ref(
            gates, c0, pooling=pooling, keep=keep, keep_scale=keep_scale, lengths=lengths
        )
    return h.contiguous(), c.contiguous(), last.contiguous()


def _fake_forward(gates, c0, keep, keep_scale, lengths, mode, bias=None):
    G = (2, 3, 4)[mode]
    B, T, GH = gates.shape
    H = GH // G
    return gates.new_empty(B, T, H), gates.new_empty(B, T, H), gates.new_empty(B, H)


def _fake_backward(grad_h, grad_c, grad_last, gates, c_seq, c0, keep, keep_scale, lengths, mode,
                   bias=None):  # fmt: skip
    return (
        torch.empty_like(gates),
        gates.new_empty(gates.shape[0], c_seq.shape[2]),
        gates.new_empty(0) if bias is None else torch.empty_like(bias),
    )


def _setup_context(ctx, inputs, output) -> None:
    gates, c0, keep, keep_scale, lengths, mode, bias = inputs
    _h, c_seq, _last = output
    ctx.save_for_backward(gates, c_seq, c0, keep, lengths, bias)
    ctx.keep_scale = keep_scale
    ctx.mode = mode
    ctx.has_c0 = c0 is not None
    # unused outputs' gradients stay None (the kernels take None), never zeros made per call
    ctx.set_materialize_grads(False)


def _backward(ctx, grad_h, grad_c, grad_last):
    gates, c_seq, c0, keep, lengths, bias = ctx.saved_tensors
    grads = [g.contiguous() if g is not None else None for g in (grad_h, grad_c, grad_last)]
    dgates, dc0, dbias = _qrnn_pooling.run_backward(
        *grads, gates, c_seq, c0, keep, ctx.keep_scale, lengths, ctx.mode, bias
    )
    dbias = dbias if bias is not None else None
    return dgates, (dc0 if ctx.has_c0 else None), None, None, None, None, dbias


_qrnn_pooling = KernelOp(
    "qrnn_pooling",
    "scan",
    Kernel("qrnn_pooling_forward", _reference_forward, _fake_forward),
    Kernel("qrnn_pooling_backward", qrnn_pooling_ref_backward, _fake_backward),
    setup_context=_setup_context,
    backward_fn=_backward,
    used_by="QRNN",
)


def qrnn_pooling(
    gates: Tensor,
    c0: Tensor | None = None,
    *,
    pooling: str = "fo",
    keep: Tensor | None = None,
    keep_scale: float = 1.0,
    lengths: Tensor | None = None,
    bias: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Fused QRNN pooling over raw gate pre-activations (see the module docstring).

    Args:
        gates: ``(B, T, G*H)`` pre-activations ``[Z | F | O | I]`` from the convolution.
        c0: optional initial memory cell ``(B, H)``.
        pooling: ``"f"``, ``"fo"`` or ``"ifo"``.
        keep: optional zoneout keep mask ``(B, T, H)`` of 0/1 values (training).
        keep_scale: multiplies ``1 - f`` (``1 - p`` in evaluation with zoneout ``p``).
        lengths: optional validated int64 CPU lengths ``(B,)``.
        bias: optional ``(G*H,)`` bias of eq 1-2, added to ``gates`` (in the kernels where
            they run; :func:`fuses_bias` says where that saves a pass).

    Returns:
        ``(h, c, c_last)``: ``(B, T, H)``, ``(B, T, H)`` and ``(B, H)``.
    """
    if isinstance(gates, Tensor):
        gates, c0, bias = autocast_inputs(gates.device, gates, c0, bias)
    if not isinstance(pooling, str) or pooling not in POOLING_MODES:
        raise ValueError(f"pooling: expected one of {sorted(POOLING_MODES)}, got {pooling!r}")
    G = GATES_PER_MODE[pooling]
    if gates.dim() != 3 or gates.shape[2] % G:
        raise ValueError(
            f"gates: expected (B, T, {G}*H) for {pooling}-pooling, got {tuple(gates.shape)}"
        )
    B, T, H = gates.shape[0], gates.shape[1], gates.shape[2] // G
    if c0 is not None:
        if c0.shape != (B, H) or c0.dtype != gates.dtype:
            raise ValueError(
                f"c0: expected shape {(B, H)} and dtype {gates.dtype}, "
                f"got {tuple(c0.shape)} and {c0.dtype}"
            )
        c0 = c0.contiguous()
    if keep is not None:
        if keep.shape != (B, T, H):
            raise ValueError(f"keep: expected shape {(B, T, H)}, got {tuple(keep.shape)}")
        keep = keep.to(gates.dtype).contiguous()
    if bias is not None:
        if not isinstance(bias, Tensor) or bias.shape != (G * H,):
            got = tuple(bias.shape) if isinstance(bias, Tensor) else type(bias).__name__
            raise ValueError(f"bias: expected shape {(G * H,)}, got {got}")
        if bias.dtype != gates.dtype or bias.device != gates.device:
            raise ValueError(
                f"bias: expected dtype {gates.dtype} on {gates.device}, "
                f"got {bias.dtype} on {bias.device}"
            )
        bias = bias.contiguous()
    route = backend.path("scan", gates.device)
    if route != backend.KERNEL and bias is not None:  # the composition: add it here
        gates, bias = gates + bias, None
    if route == backend.EXPORT:  # ONNX export: one scan of symbolic length (ops/scan_export.py)
        return export_pooling(gates, c0, pooling, keep, keep_scale, lengths)
    if route == backend.REFERENCE:  # the readable reference, through autograd
        return qrnn_pooling_ref(
            gates, c0, pooling=pooling, keep=keep, keep_scale=keep_scale, lengths=lengths
        )
    return _qrnn_pooling(
        gates.contiguous(), c0, keep, float(keep_scale), lengths, POOLING_MODES[pooling], bias
    )


def fuses_bias(device: torch.device) -> bool:
    """Whether a QRNN layer on ``device`` should leave its gates' bias out of its GEMM and give
    it to :func:`qrnn_pooling` (module docstring): on CPU with the compiled kernels. On CUDA the
    GEMM's epilogue adds it at no cost, and the composition adds it in an op of its own."""
    return device.type == "cpu" and backend.path("scan", device) == backend.KERNEL


def export_pooling(
    gates: Tensor,
    c0: Tensor | None,
    pooling: str,
    keep: Tensor | None,
    keep_scale: float,
    lengths: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor]:
    """QRNN pooling while an export is traced (:mod:`ctrlrnn.ops.scan_export`), QRNN paper eq
    1-6 as :func:`qrnn_pooling_ref` computes it -> ``(h, c, c_last)``.

    The gates are computed for all steps at once; eq 3-5 is then the linear scan
    ``c_t = (1 - s (1 - f_t)) c_{t-1} + b_t`` with ``b = s (1 - f) z`` (eq 3-4) or ``i z``
    (eq 5), ``s`` the zoneout factor of eq 6, and ``h = o c`` (zero past a length, as ``c``).
    """
    out_dtype = gates.dtype
    g = gates.to(torch.float32 if gates.dtype in (torch.float16, torch.bfloat16) else gates.dtype)
    z, f, o, i = gate_activations(g, pooling)
    one_minus_f = zoneout_factor(f, keep, keep_scale) * (1 - f)  # eq 6, no rescaling
    b = i * z if i is not None else one_minus_f * z  # eq 5: i z; eq 3-4: (1 - f) z
    c = g.new_zeros(g.shape[0], z.shape[2]) if c0 is None else c0.to(g.dtype)
    c_seq, c_last = scan_export.linear_scan(1 - one_minus_f, b, c, lengths, False)
    h = c_seq if o is None else o * c_seq  # eq 4-5: h = o c
    return h.to(out_dtype), c_seq.to(out_dtype), c_last.to(out_dtype)


def pooling_step(
    device: torch.device,
) -> Callable[[Tensor, Tensor | None, int, Tensor | None], Sequence[Tensor]]:
    """``fn(gates, c0, mode, bias)``: :func:`qrnn_pooling` of contiguous ``gates``
    ``(B, T, G*H)`` from a contiguous ``c0`` ``(B, H)`` of their dtype (or None: zeros), for mode
    ``POOLING_MODES[pooling]``, with the gates' ``bias`` ``(G*H,)`` or None, without zoneout or
    lengths, and without the checks and the route the wrapper decides at every call: for a
    caller that made those checks (a layer's or a cell's step, a decoder once per decode)
    where nothing traces, no autocast is on and no autograd graph is recorded. On the compiled
    kernel's route it is the kernel the wrapper calls there, looked up once
    (:meth:`~ctrlrnn.ops.kernel_op.KernelOp.resolved`); elsewhere the wrapper."""
    if backend.path("scan", device) == backend.KERNEL:
        kernel = _qrnn_pooling.resolved(device)
        return lambda gates, c0, mode, bias: kernel(gates, c0, None, 1.0, None, mode, bias)
    modes = list(POOLING_MODES)
    return lambda gates, c0, mode, bias: qrnn_pooling(gates, c0, pooling=modes[mode], bias=bias)
