"""Helpers for padded, variable-length batches laid out batch-first ``(B, T, ...)``."""

from __future__ import annotations

import torch
from torch import Tensor


def length_mask(lengths: Tensor, max_len: int) -> Tensor:
    """Bool mask ``(B, T)``: True where ``t < lengths[b]``."""
    steps = torch.arange(max_len, device=lengths.device)
    return steps.unsqueeze(0) < lengths.unsqueeze(1)


def zero_padding(x: Tensor, lengths: Tensor | None) -> Tensor:
    """``x`` (``(B, T, ...)``) with every position past its sequence's length set to 0.

    Whatever the padding held (NaN and Inf included) then never reaches a weight gradient: a
    gate GEMM's weight gradient sums ``x_t * grad_t`` over all steps, and ``0 * NaN`` is NaN even
    where ``grad_t`` is 0. The gradient w.r.t. the padded positions is 0.
    """
    if lengths is None:
        return x
    mask = length_mask(lengths.to(x.device), x.shape[1])
    mask = mask.view(*mask.shape, *([1] * (x.dim() - 2)))
    return torch.where(mask, x, torch.zeros((), dtype=x.dtype, device=x.device))


def reverse_index(lengths: Tensor, max_len: int) -> Tensor:
    """Index ``(B, T)`` that reverses each sequence within its own length.

    Position ``t < L`` maps to ``L - 1 - t``; padded positions map to themselves, so applying
    the gather twice is the identity.
    """
    steps = torch.arange(max_len, device=lengths.device).unsqueeze(0)
    lens = lengths.unsqueeze(1)
    return torch.where(steps < lens, lens - 1 - steps, steps)


def reverse_padded(x: Tensor, lengths: Tensor | None) -> Tensor:
    """Reverse each sequence of ``x`` (``(B, T, ...)``) in time within its own length."""
    if lengths is None:
        return x.flip(1)
    idx = reverse_index(lengths.to(x.device), x.shape[1])
    idx = idx.view(*idx.shape, *([1] * (x.dim() - 2))).expand_as(x)
    return x.gather(1, idx)


def last_valid(x: Tensor, lengths: Tensor | None) -> Tensor:
    """The entry at the last valid step of each sequence: ``x[b, lengths[b] - 1]``."""
    if lengths is None:
        return x[:, -1]
    idx = (lengths.to(x.device) - 1).clamp(min=0)
    idx = idx.view(-1, 1, *([1] * (x.dim() - 2))).expand(x.shape[0], 1, *x.shape[2:])
    return x.gather(1, idx).squeeze(1)
