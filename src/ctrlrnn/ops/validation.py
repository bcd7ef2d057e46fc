"""Argument checks shared by ops and layers: each error is a ValueError naming the argument."""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import torch
from torch import Tensor


def check_flag(name: str, value: object) -> bool:
    """A ``bool`` (or the integers 0 and 1, as ``nn.LSTM`` code sometimes passes)."""
    if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
        return bool(value)
    raise ValueError(f"{name}: expected True or False, got {value!r}")


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


def step_input(input: object, input_size: int, like: Tensor | None) -> tuple[Tensor, bool]:
    """A cell's one-step ``input``: ``(B, input_size)`` or unbatched ``(input_size,)``, of the
    dtype and device of the weight ``like`` (unchecked when None). Returns the batched view and
    whether it was unbatched."""
    if not isinstance(input, Tensor) or input.dim() not in (1, 2):
        got = tuple(input.shape) if isinstance(input, Tensor) else type(input).__name__
        raise ValueError(f"input: expected a (B, input_size) or (input_size,) tensor, got {got}")
    unbatched = input.dim() == 1
    x = input.unsqueeze(0) if unbatched else input
    if x.shape[-1] != input_size:
        raise ValueError(f"input: expected input_size={input_size}, got {x.shape[-1]}")
    if like is not None and (x.dtype != like.dtype or x.device != like.device):
        raise ValueError(
            f"input: expected dtype {like.dtype} on {like.device}, got {x.dtype} on {x.device}"
        )
    return x, unbatched


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
        if lengths.device.type == "meta":
            raise ValueError(f"{name}: a tensor on the meta device holds no values; give the "
                             f"lengths on the CPU")
        lens = lengths.detach().to("cpu", torch.int64).contiguous()
    else:
        try:
            values = list(lengths)  # type: ignore[arg-type]
        except TypeError as exc:
            raise ValueError(f"{name}: expected a tensor or a sequence of integers, got "
                             f"{type(lengths).__name__}") from exc
        bad = [v for v in values if isinstance(v, bool) or not isinstance(v, numbers.Integral)]
        if bad:
            raise ValueError(f"{name}: expected integers, got {bad[0]!r} "
                             f"({type(bad[0]).__name__})")
        lens = torch.as_tensor([int(v) for v in values], dtype=torch.int64)
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
