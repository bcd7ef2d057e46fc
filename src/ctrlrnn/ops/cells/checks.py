"""The argument checks and dtype handling every cell's public function shares.

float16/bfloat16 inputs are computed in float32 (:func:`compute_dtype`, :func:`cast`) and the
outputs cast back (:func:`uncast`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from ctrlrnn.ops.compiled_op import torchscript_tracing
from ctrlrnn.ops.validation import check_lengths

_HALF = (torch.float16, torch.bfloat16)


def check_x_proj(x_proj: Tensor, gates: int, weight_hh: Tensor, gates_h: int) -> tuple[int, ...]:
    if not isinstance(x_proj, Tensor) or x_proj.dim() != 3:
        raise ValueError(
            f"x_proj: expected a 3-D tensor (batch, time, {gates}*hidden), got "
            f"{tuple(x_proj.shape) if isinstance(x_proj, Tensor) else type(x_proj).__name__}"
        )
    if not x_proj.is_floating_point():
        raise ValueError(f"x_proj: expected a floating-point tensor, got {x_proj.dtype}")
    if not isinstance(weight_hh, Tensor) or weight_hh.dim() != 2:
        raise ValueError(f"weight_hh: expected a 2-D tensor ({gates_h}*hidden, hidden)")
    batch, steps, width = x_proj.shape
    hidden = weight_hh.shape[1]
    if weight_hh.shape[0] != gates_h * hidden:
        raise ValueError(
            f"weight_hh: expected shape ({gates_h}*hidden, hidden) = ({gates_h * hidden}, "
            f"{hidden}), got {tuple(weight_hh.shape)}"
        )
    if width != gates * hidden:
        raise ValueError(
            f"x_proj: last dimension must be {gates}*hidden = {gates * hidden} (hidden = "
            f"weight_hh.shape[1] = {hidden}), got {width}"
        )
    return batch, steps, hidden


def check_tensor(name: str, t: Tensor, shape: Sequence[int], like: Tensor) -> None:
    if not isinstance(t, Tensor):
        raise ValueError(f"{name}: expected a tensor of shape {tuple(shape)}, got {type(t)}")
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {tuple(t.shape)}")
    if t.device != like.device:
        raise ValueError(f"{name}: expected device {like.device} (as x_proj), got {t.device}")
    ok = t.dtype == like.dtype or (like.dtype in _HALF and t.dtype in (*_HALF, torch.float32))
    if not ok:
        raise ValueError(f"{name}: expected dtype {like.dtype} (as x_proj), got {t.dtype}")


def checked_lengths(lengths: Tensor | None, batch: int, steps: int, like: Tensor) -> Tensor | None:
    """Validated lengths in [0, T] (the shared check), on the device the kernels read them."""
    if lengths is None:
        return None
    if not isinstance(lengths, Tensor):
        raise ValueError(f"lengths: expected an integer tensor of shape ({batch},)")
    checked = check_lengths(lengths, batch, steps, allow_zero=True)
    return checked if like.device.type == "cpu" else checked.to(like.device)


def state(name: str, s: Tensor | None, batch: int, hidden: int, like: Tensor) -> Tensor:
    if s is None:
        return like.new_zeros(batch, hidden)
    check_tensor(name, s, (batch, hidden), like)
    return s


def needs_grad(*tensors: Tensor | None) -> bool:
    """Whether autograd will need the saved gate activations (else the op skips storing them).

    Always while TorchScript traces: the answer enters the trace as a constant, and a module
    traced without gradients (``torch.no_grad()``, frozen weights) may be trained later."""
    if torchscript_tracing():
        return True
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def compute_dtype(x_proj: Tensor) -> torch.dtype:
    return torch.float32 if x_proj.dtype in _HALF else x_proj.dtype


def cast(tensors: Sequence[Tensor | None], dtype: torch.dtype) -> list[Any]:
    return [t.to(dtype) if t is not None and t.dtype != dtype else t for t in tensors]


def uncast(outs: Sequence[Tensor], dtype: torch.dtype) -> tuple[Tensor, ...]:
    return tuple(o.to(dtype) if o.dtype != dtype else o for o in outs)
