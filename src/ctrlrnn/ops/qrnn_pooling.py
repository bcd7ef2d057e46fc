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
Where no compiled kernel exists, :func:`qrnn_pooling` runs :func:`qrnn_pooling_ref` through
autograd instead.
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
from ctrlrnn.ops.linear_scan import _reference_backward as _scan_reference_backward

POOLING_MODES: dict[str, int] = {"f": 0, "fo": 1, "ifo": 2}
GATES_PER_MODE: dict[str, int] = {"f": 2, "fo": 3, "ifo": 4}


def zoneout_factor(f: Tensor, keep: Tensor | None, keep_scale: float) -> Tensor | float:
    """``s`` of eq 6 as the pooling applies it, ``F = 1 - s (1 - f)``: the 0/1 keep mask times
    ``keep_scale`` in training, ``keep_scale`` (``1 - p``, the expectation) in evaluation."""
    return keep.to(f.dtype) * keep_scale if keep is not None else keep_scale


def gate_activations(
    g: Tensor, pooling: str
) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
    """``z`` (eq 1), ``f`` (eq 2), ``o`` and ``i`` (None where the pooling has none) from the
    pre-activations ``g`` ``(B, T, G*H)`` laid out ``[Z | F | O | I]``."""
    H = g.shape[2] // GATES_PER_MODE[pooling]
    z = torch.tanh(g[..., :H])  # eq 1
    f = torch.sigmoid(g[..., H : 2 * H])  # eq 2
    o = torch.sigmoid(g[..., 2 * H : 3 * H]) if pooling in ("fo", "ifo") else None
    i = torch.sigmoid(g[..., 3 * H :]) if pooling == "ifo" else None
    return z, f, o, i


def qrnn_pooling_ref(
    gates: Tensor,
    c0: Tensor | None = None,
    *,
    pooling: str = "fo",
    keep: Tensor | None = None,
    keep_scale: float = 1.0,
    lengths: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Reference QRNN pooling, one Python step per time step, straight from eq 1-6.

    Returns ``(h, c, c_last)``: hidden outputs and memory cells ``(B, T, H)`` (zero past each
    sequence's length) and the last valid cell ``(B, H)``.
    """
    out_dtype = gates.dtype
    acc = torch.float32 if gates.dtype in (torch.float16, torch.bfloat16) else gates.dtype
    g = gates.to(acc)
    B, T, GH = g.shape
    H = GH // GATES_PER_MODE[pooling]
    z, f, o, i = gate_activations(g, pooling)
    one_minus_f = zoneout_factor(f, keep, keep_scale) * (1 - f)  # eq 6, no rescaling
    c = g.new_zeros(B, H) if c0 is None else c0.to(acc)
    hs, cs = [], []
    for t in range(T):
        inp = i[:, t] * z[:, t] if i is not None else one_minus_f[:, t] * z[:, t]
        c_new = (1 - one_minus_f[:, t]) * c + inp  # eq 3 / 4 / 5
        h_new = o[:, t] * c_new if o is not None else c_new
        if lengths is not None:
            valid = (lengths.to(g.device) > t).unsqueeze(1)
            c = torch.where(valid, c_new, c)
            c_new = torch.where(valid, c_new, torch.zeros_like(c_new))
            h_new = torch.where(valid, h_new, torch.zeros_like(h_new))
        else:
            c = c_new
        hs.append(h_new)
        cs.append(c_new)
    h_seq = torch.stack(hs, 1) if hs else g.new_zeros(B, 0, H)
    c_seq = torch.stack(cs, 1) if cs else g.new_zeros(B, 0, H)
    return h_seq.to(out_dtype), c_seq.to(out_dtype), c.to(out_dtype)


def _qrnn_pooling_impl(
    gates: Tensor,
    c0: Tensor | None,
    keep: Tensor | None,
    keep_scale: float,
    lengths: Tensor | None,
    mode: int,
) -> tuple[Tensor, Tensor, Tensor]:
    pooling = list(POOLING_MODES)[mode]
    ext = kernel_for("scan", gates.device)
    if ext is None:
        with torch.no_grad():
            h, c, last = qrnn_pooling_ref(
                gates, c0, pooling=pooling, keep=keep, keep_scale=keep_scale, lengths=lengths
            )
        return h.contiguous(), c.contiguous(), last.contiguous()
    h, c, last = ext.qrnn_pooling_forward(gates, c0, keep, keep_scale, lengths, mode)
    return h, c, last


_qrnn_pooling_op = torch.library.custom_op("ctrlrnn::qrnn_pooling", mutates_args=())(
    _qrnn_pooling_impl
)


@_qrnn_pooling_op.register_fake
def _(gates, c0, keep, keep_scale, lengths, mode):
    G = (2, 3, 4)[mode]
    B, T, GH = gates.shape
    H = GH // G
    return gates.new_empty(B, T, H), gates.new_empty(B, T, H), gates.new_empty(B, H)


def _qrnn_pooling_backward_impl(
    grad_h: Tensor | None,
    grad_c: Tensor | None,
    grad_last: Tensor | None,
    gates: Tensor,
    c_seq: Tensor,
    c0: Tensor | None,
    keep: Tensor | None,
    keep_scale: float,
    lengths: Tensor | None,
    mode: int,
) -> tuple[Tensor, Tensor]:
    ext = kernel_for("scan", gates.device)
    if ext is not None:
        dgates, dc0 = ext.qrnn_pooling_backward(
            grad_h, grad_c, grad_last, gates, c_seq, c0, keep, keep_scale, lengths, mode
        )
        return dgates, dc0
    return _reference_backward(
        grad_h, grad_c, grad_last, gates, c_seq, c0, keep, keep_scale, lengths, mode
    )


def _reference_backward(
    grad_h: Tensor | None,
    grad_c: Tensor | None,
    grad_last: Tensor | None,
    gates: Tensor,
    c_seq: Tensor,
    c0: Tensor | None,
    keep: Tensor | None,
    keep_scale: float,
    lengths: Tensor | None,
    mode: int,
) -> tuple[Tensor, Tensor]:
    """The gradients of :func:`qrnn_pooling_ref`, written out (a custom op's body runs below
    autograd, so it cannot differentiate the reference): eq 3-5 are the scan
    ``c_t = a_t c_{t-1} + b_t`` with ``a = 1 - s (1 - f)`` (``s`` the zoneout factor of eq 6),
    ``b = s (1 - f) z`` (eq 3-4) or ``i z`` (eq 5); the scan's reverse pass gives ``da, db``,
    then the chain rule through eq 1-2 and ``h = o c``."""
    pooling = list(POOLING_MODES)[mode]
    dtype = gates.dtype
    acc = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    g = gates.to(acc)
    z, f, o, i = gate_activations(g, pooling)
    s = zoneout_factor(f, keep, keep_scale)
    a = 1 - s * (1 - f)  # eq 6: 1 - f is dropped (zoneout) without rescaling
    c = c_seq.to(acc)
    g_c = grad_c.to(acc) if grad_c is not None else torch.zeros_like(c)
    if grad_h is not None:
        g_c = g_c + (grad_h.to(acc) * o if o is not None else grad_h.to(acc))
    last = grad_last.to(acc) if grad_last is not None else None
    c_init = c0.to(acc) if c0 is not None else None
    da, db, dc0 = _scan_reference_backward(g_c, last, a, c, c_init, lengths, False)
    if i is None:  # b = s (1 - f) z
        d_f = (da - db * z) * s
        d_z = db * s * (1 - f)
    else:  # b = i z
        d_f = da * s
        d_z = db * i
    parts = [d_z * (1 - z * z), d_f * f * (1 - f)]
    if o is not None:
        d_o = grad_h.to(acc) * c if grad_h is not None else torch.zeros_like(c)
        parts.append(d_o * o * (1 - o))
    if i is not None:
        parts.append(db * z * i * (1 - i))
    dc0 = dc0 if c0 is not None else torch.zeros_like(dc0)
    return torch.cat(parts, -1).to(dtype), dc0.to(dtype)


_qrnn_pooling_backward_op = torch.library.custom_op(
    "ctrlrnn::qrnn_pooling_backward", mutates_args=()
)(_qrnn_pooling_backward_impl)


@_qrnn_pooling_backward_op.register_fake
def _(grad_h, grad_c, grad_last, gates, c_seq, c0, keep, keep_scale, lengths, mode):
    return torch.empty_like(gates), gates.new_empty(gates.shape[0], c_seq.shape[2])


def _setup_context(ctx, inputs, output) -> None:
    gates, c0, keep, keep_scale, lengths, mode = inputs
    _h, c_seq, _last = output
    ctx.save_for_backward(gates, c_seq, c0, keep, lengths)
    ctx.keep_scale = keep_scale
    ctx.mode = mode
    ctx.has_c0 = c0 is not None
    # unused outputs' gradients stay None (the kernels take None), never zeros made per call
    ctx.set_materialize_grads(False)


def _backward(ctx, grad_h, grad_c, grad_last):
    gates, c_seq, c0, keep, lengths = ctx.saved_tensors
    grads = [g.contiguous() if g is not None else None for g in (grad_h, grad_c, grad_last)]
    bwd = backward_of(_qrnn_pooling_backward_op, _qrnn_pooling_backward_impl, *grads, gates)
    dgates, dc0 = bwd(*grads, gates, c_seq, c0, keep, ctx.keep_scale, lengths, ctx.mode)
    return dgates, (dc0 if ctx.has_c0 else None), None, None, None, None


_qrnn_pooling = CompiledOp(
    "qrnn_pooling", _qrnn_pooling_op, _qrnn_pooling_impl, _setup_context, _backward
)
forbid_double_backward(_qrnn_pooling_backward_op, "qrnn_pooling", "QRNN")


def qrnn_pooling(
    gates: Tensor,
    c0: Tensor | None = None,
    *,
    pooling: str = "fo",
    keep: Tensor | None = None,
    keep_scale: float = 1.0,
    lengths: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Fused QRNN pooling over raw gate pre-activations (see the module docstring).

    Args:
        gates: ``(B, T, G*H)`` pre-activations ``[Z | F | O | I]`` from the convolution.
        c0: optional initial memory cell ``(B, H)``.
        pooling: ``"f"``, ``"fo"`` or ``"ifo"``.
        keep: optional zoneout keep mask ``(B, T, H)`` of 0/1 values (training).
        keep_scale: multiplies ``1 - f`` (``1 - p`` in evaluation with zoneout ``p``).
        lengths: optional validated int64 CPU lengths ``(B,)``.

    Returns:
        ``(h, c, c_last)``: ``(B, T, H)``, ``(B, T, H)`` and ``(B, H)``.
    """
    if isinstance(gates, Tensor):
        gates, c0 = autocast_inputs(gates.device, gates, c0)
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
    if scan_export.active():  # ONNX export: one scan of symbolic length (ops/scan_export.py)
        return scan_export.qrnn_pooling(gates, c0, pooling, keep, keep_scale, lengths)
    if not has_kernel("scan", gates.device):  # the readable reference, through autograd
        return qrnn_pooling_ref(
            gates, c0, pooling=pooling, keep=keep, keep_scale=keep_scale, lengths=lengths
        )
    return _qrnn_pooling(
        gates.contiguous(), c0, keep, float(keep_scale), lengths, POOLING_MODES[pooling]
    )
