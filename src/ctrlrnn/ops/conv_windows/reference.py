"""The windows of the QRNN's convolution (QRNN paper eq 1) from torch ops, and their adjoint:
the reference the compiled kernels (``conv_windows.cpp``) must equal, and what runs elsewhere."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["shifted_windows_adjoint_ref", "shifted_windows_ref"]


def shifted_windows_ref(x: Tensor, offsets: list[int], steps: int) -> Tensor:
    """``(B, steps, k*D)``: block ``j`` of step ``t`` is ``x[:, t + offsets[j]]``, zeros where
    ``t + offsets[j]`` is outside ``[0, S)`` (``x`` is ``(B, S, D)``)."""
    length = x.shape[1]
    before = max(0, -min(offsets))
    after = max(0, max(offsets) + steps - length)
    padded = F.pad(x, (0, 0, before, after))
    return torch.cat([padded[:, before + o : before + o + steps] for o in offsets], dim=-1)


def shifted_windows_adjoint_ref(g: Tensor, offsets: list[int], length: int) -> Tensor:
    """The gradient of :func:`shifted_windows_ref` with respect to ``x`` (``(B, length, D)``),
    for the output gradient ``g`` (``(B, steps, k*D)``): ``dx[:, s] = sum_j g[:, s - offsets[j],
    block j]`` over the ``j`` that read ``s``."""
    B, steps, width = g.shape
    D = width // len(offsets)
    dx = g.new_zeros(B, length, D)
    for j, o in enumerate(offsets):
        first, last = max(0, -o), min(steps, length - o)  # the steps t that read t + o in range
        if first < last:
            dx[:, first + o : last + o] += g[:, first:last, j * D : (j + 1) * D]
    return dx
