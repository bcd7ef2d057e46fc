"""Reference linear scan, written straight from its definition.

``h_t = a_t * h_{t-1} + b_t`` elementwise, one Python step per time step, differentiated by
autograd. It is the oracle the compiled kernels are tested against, and the fallback where no
compiled kernel exists. Half-precision inputs are accumulated in float32.

:func:`linear_scan_ref_backward` writes the scan's reverse pass out step by step: the backward
of the custom op where it has no kernel, and the scan part of QRNN pooling's and the METAGROSS
level's written-out backwards (their custom ops' bodies run below autograd, which therefore
cannot differentiate the reference for them).
"""

# No `from __future__ import annotations`: torch 2.4's custom_op reads the annotations of the
# functions it registers (the backward below is the fallback of a custom op) as written.

import torch
from torch import Tensor

from ctrlrnn.ops.padding import reverse_padded

__all__ = ["linear_scan_ref", "linear_scan_ref_backward"]


def linear_scan_ref(
    a: Tensor,
    b: Tensor,
    h0: Tensor | None = None,
    *,
    reverse: bool = False,
    lengths: Tensor | None = None,
    return_last: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Reference for :func:`ctrlrnn.linear_scan` (same arguments and semantics).

    Steps ``t >= lengths[b]`` leave the state unchanged and output zeros; ``reverse`` runs each
    sequence backwards within its own length.
    """
    out_dtype = a.dtype
    acc = torch.float32 if a.dtype in (torch.float16, torch.bfloat16) else a.dtype
    a, b = a.to(acc), b.to(acc)
    if reverse:
        a, b = reverse_padded(a, lengths), reverse_padded(b, lengths)
    batch, steps, channels = a.shape
    h = a.new_zeros(batch, channels) if h0 is None else h0.to(acc)
    outs = []
    for t in range(steps):
        h_new = a[:, t] * h + b[:, t]
        if lengths is None:
            h = h_new
            outs.append(h_new)
        else:
            valid = (lengths.to(a.device) > t).unsqueeze(1)
            h = torch.where(valid, h_new, h)
            outs.append(torch.where(valid, h_new, torch.zeros_like(h_new)))
    out = torch.stack(outs, dim=1) if outs else a.new_zeros(batch, 0, channels)
    if reverse:
        out = reverse_padded(out, lengths)
    out = out.to(out_dtype)
    if return_last:
        return out, h.to(out_dtype)
    return out


def linear_scan_ref_backward(
    grad_out: Tensor | None,
    grad_last: Tensor | None,
    a: Tensor,
    out: Tensor,
    h0: Tensor | None,
    lengths: Tensor | None,
    reverse: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """``(da, db, dh0)`` of :func:`linear_scan_ref` given the gradients of its outputs ``h``
    and ``h_last`` (None for zero): the single reverse pass

        d = g_t + carry;  db_t = d;  da_t = d * h_{t-1};  carry = d * a_t

    started from ``grad_last``, one Python step per time step; ``carry`` at the end is ``dh0``.
    Steps past a length pass ``carry`` through and get zero gradients.
    """
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
