"""Argument checks shared by ops and layers: each error is a ValueError naming the argument."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def check_same(name_a: str, a: Tensor, name_b: str, b: Tensor) -> None:
    """``a`` and ``b`` must be tensors of one shape, dtype and device."""
    for name, x in ((name_a, a), (name_b, b)):
        if not isinstance(x, Tensor):
            raise ValueError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    if a.shape != b.shape:
        raise ValueError(
            f"{name_b}: expected the shape of {name_a} {tuple(a.shape)}, got {tuple(b.shape)}"
        )
    if a.dtype != b.dtype:
        raise ValueError(f"{name_b}: expected the dtype of {name_a} ({a.dtype}), got {b.dtype}")
    if a.device != b.device:
        raise ValueError(f"{name_b}: expected device {a.device} of {name_a}, got {b.device}")


def check_lengths(
    lengths: Tensor | Sequence[int],
    batch: int,
    steps: int,
    *,
    allow_zero: bool = False,
    name: str = "lengths",
) -> Tensor:
    """Validate sequence lengths and return them as a contiguous int64 CPU tensor ``(B,)``.

    Values must lie in ``[1, steps]`` (``[0, steps]`` with ``allow_zero``) and there must be one
    per sequence of the batch.
    """
    if isinstance(lengths, Tensor):
        if lengths.is_floating_point() or lengths.is_complex() or lengths.dtype == torch.bool:
            raise ValueError(f"{name}: expected an integer tensor, got {lengths.dtype}")
        lens = lengths.detach().to("cpu", torch.int64).contiguous()
    else:
        try:
            lens = torch.as_tensor(list(lengths), dtype=torch.int64)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{name}: expected a sequence of integers ({exc})") from exc
    if lens.dim() != 1:
        raise ValueError(
            f"{name}: expected a 1-D tensor of shape ({batch},), got {tuple(lens.shape)}"
        )
    if lens.numel() != batch:
        raise ValueError(f"{name}: expected {batch} lengths (one per sequence), got {lens.numel()}")
    if torch.compiler.is_compiling() or lens.numel() == 0:
        return lens
    low = 0 if allow_zero else 1
    lo, hi = int(lens.min()), int(lens.max())
    if lo < low:
        raise ValueError(f"{name}: every length must be >= {low}, got {lo}")
    if hi > steps:
        raise ValueError(f"{name}: every length must be <= the sequence length {steps}, got {hi}")
    return lens
