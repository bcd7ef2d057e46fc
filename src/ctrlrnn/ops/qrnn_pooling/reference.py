"""Reference QRNN pooling (QRNN paper eq 1-6), written straight from its equations.

:func:`qrnn_pooling_ref` runs one Python step per time step and is differentiated by autograd:
the oracle of the compiled kernels and the path where none exists.
:func:`qrnn_pooling_ref_backward` is its gradient written out, for the custom op's backward
where no kernel exists. :mod:`ctrlrnn.ops.qrnn_pooling` says what the pooling computes.
"""

# No `from __future__ import annotations`: torch 2.4's custom_op reads the annotations of the
# functions it registers (the backward below is the fallback of a custom op) as written.

import torch
from torch import Tensor

from ctrlrnn.ops.linear_scan.reference import linear_scan_ref_backward

__all__ = ["GATES_PER_MODE", "POOLING_MODES", "gate_activations", "qrnn_pooling_ref",
           "qrnn_pooling_ref_backward", "zoneout_factor"]

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


def qrnn_pooling_ref_backward(
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
    bias: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """``(dgates, dc0, dbias)`` of :func:`qrnn_pooling_ref` run on ``gates + bias`` (``dbias``
    empty without a bias), written out (the fallback of the custom
    op's backward, whose body runs below autograd, so it cannot differentiate the reference):
    eq 3-5 are the scan ``c_t = a_t c_{t-1} + b_t`` with ``a = 1 - s (1 - f)`` (``s`` the
    zoneout factor of eq 6), ``b = s (1 - f) z`` (eq 3-4) or ``i z`` (eq 5); the scan's reverse
    pass gives ``da, db``, then the chain rule through eq 1-2 and ``h = o c``."""
    pooling = list(POOLING_MODES)[mode]
    dtype = gates.dtype
    acc = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    g = gates.to(acc) if bias is None else (gates + bias).to(acc)
    z, f, o, i = gate_activations(g, pooling)
    s = zoneout_factor(f, keep, keep_scale)
    a = 1 - s * (1 - f)  # eq 6: 1 - f is dropped (zoneout) without rescaling
    c = c_seq.to(acc)
    g_c = grad_c.to(acc) if grad_c is not None else torch.zeros_like(c)
    if grad_h is not None:
        g_c = g_c + (grad_h.to(acc) * o if o is not None else grad_h.to(acc))
    last = grad_last.to(acc) if grad_last is not None else None
    c_init = c0.to(acc) if c0 is not None else None
    da, db, dc0 = linear_scan_ref_backward(g_c, last, a, c, c_init, lengths, False)
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
    dgates = torch.cat(parts, -1)
    dbias = gates.new_empty(0) if bias is None else dgates.sum((0, 1)).to(dtype)
    return dgates.to(dtype), dc0.to(dtype), dbias
