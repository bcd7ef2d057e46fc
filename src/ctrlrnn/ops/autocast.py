"""Autocast for ctrlrnn's ops (``torch.autocast``, CPU bfloat16 and CUDA float16/bfloat16).

Autocast changes the dtype of torch's own ops (a gate GEMM ``F.linear`` returns bfloat16), not
of custom ops, so a layer under autocast hands its ops a mix of float32 (parameters, the input,
residuals) and bfloat16 (GEMM outputs). Like ``torch.nn.LSTM`` under autocast, each op then
runs in the autocast dtype: :func:`autocast_inputs` casts its floating inputs to that dtype, the
kernels accumulate the recurrent state in float32 (as they do for any float16/bfloat16 input),
and the outputs come back in the autocast dtype. The casts are differentiable, so float32
parameters get float32 gradients.

A device type ``torch.autocast`` does not cover (``meta``, where a layer only computes shapes)
has no autocast state to read: :func:`autocast_dtype` answers None there, as it does for a
device whose autocast is off.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ctrlrnn.ops.compiled_op import constant_under_compile


@constant_under_compile
def autocast_available(device_type: str) -> bool:
    """Whether ``torch.autocast`` covers ``device_type`` (``"cpu"`` and ``"cuda"`` do,
    ``"meta"`` does not: torch's autocast queries raise there). Answered once while dynamo
    traces, as a constant."""
    return bool(torch.amp.is_autocast_available(device_type))


def autocast_dtype(device: torch.device) -> torch.dtype | None:
    """The dtype ``torch.autocast`` imposes on tensors of ``device`` now, or None (disabled, or
    a device type autocast does not cover, such as ``meta``)."""
    if not autocast_available(device.type) or not torch.is_autocast_enabled(device.type):
        return None
    return torch.get_autocast_dtype(device.type)


def accepts_dtype(dtype: torch.dtype, module_dtype: torch.dtype, device: torch.device) -> bool:
    """Whether a layer whose parameters are ``module_dtype`` takes an input of ``dtype``: its
    own dtype, or under autocast the autocast dtype too (as ``torch.nn.LSTM`` does)."""
    return dtype == module_dtype or dtype == autocast_dtype(device)


def autocast_inputs(device: torch.device, *tensors: Tensor | None) -> list[Tensor | None]:
    """``tensors`` with every floating one cast to the autocast dtype of ``device`` when
    autocast is enabled there; unchanged (the same objects) otherwise."""
    dtype = autocast_dtype(device)
    if dtype is None:
        return list(tensors)
    return [t.to(dtype) if isinstance(t, Tensor) and t.is_floating_point() else t for t in tensors]
