"""Reference linear scan, written straight from its definition.

``h_t = a_t * h_{t-1} + b_t`` elementwise, one Python step per time step, differentiated by
autograd. It is the oracle the compiled kernels are tested against, and the fallback where no
compiled kernel exists. Half-precision inputs are accumulated in float32.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ctrlrnn.ops.padding import reverse_padded


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
