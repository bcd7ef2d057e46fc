"""The windows of the QRNN's convolution (QRNN paper eq 1), built in one copy on CPU.

Eq 1 computes every gate of step ``t`` from the ``k`` inputs of a window; ctrlrnn does it as one
GEMM over the windows laid side by side, ``(B, T, k*D)``. Tap ``j`` of step ``t`` reads input
``t + offsets[j]``, and zeros where that falls outside the input: ``offsets = (-(k-1), .., 0)``
is the masked (causal) convolution of section 2, ``(-a, .., b)`` the centred one of section 3.3.

:func:`shifted_windows_ref` builds them from torch ops, a pad then a concatenation of ``k``
slices: two passes over the output forward, and backward ``k`` zero-filled slices of the padded
input added up. On CPU with the compiled kernels, :func:`shifted_windows` writes the windows
once into the kernels' output cache (``conv_windows.cpp`` beside this file), and its gradient, the
adjoint (``dx[s] = sum_j g[s - offsets[j], tap j]``), once: each is the other's derivative, so
double backward works. Elsewhere (CUDA, ``torch.compile``, ONNX export, the reference backend,
small inputs) it is the reference itself.
"""

# No `from __future__ import annotations`: torch 2.4's custom_op reads the annotations of the
# functions it registers as written, and cannot parse them as strings.

from typing import Any, List  # noqa: UP035 - torch 2.4's custom_op schema needs typing.List

import torch
from torch import Tensor

from ctrlrnn.ops import backend
from ctrlrnn.ops.compiled_op import CompiledOp
from ctrlrnn.ops.conv_windows.reference import shifted_windows_adjoint_ref, shifted_windows_ref

__all__ = ["shifted_windows", "shifted_windows_adjoint_ref", "shifted_windows_ref"]

#: Below this many output bytes the torch ops' fixed cost is smaller than the custom op's.
KERNEL_MIN_BYTES = 1 << 20


def _kernel() -> Any:
    return backend.kernel_for("scan", torch.device("cpu"))


def _windows_impl(x: Tensor, offsets: List[int], steps: int) -> Tensor:  # noqa: UP006
    ext = _kernel() if x.device.type == "cpu" else None
    if ext is None:
        return shifted_windows_ref(x, offsets, steps)
    return ext.shifted_windows(x, offsets, steps)


def _adjoint_impl(g: Tensor, offsets: List[int], length: int) -> Tensor:  # noqa: UP006
    ext = _kernel() if g.device.type == "cpu" else None
    if ext is None:
        return shifted_windows_adjoint_ref(g, offsets, length)
    return ext.shifted_windows_adjoint(g, offsets, length)


_windows_op = torch.library.custom_op("ctrlrnn::shifted_windows", _windows_impl, mutates_args=())
_adjoint_op = torch.library.custom_op(
    "ctrlrnn::shifted_windows_adjoint", _adjoint_impl, mutates_args=()
)


@_windows_op.register_fake
def _(x, offsets, steps):
    return x.new_empty(x.shape[0], steps, len(offsets) * x.shape[2])


@_adjoint_op.register_fake
def _(g, offsets, length):
    return g.new_empty(g.shape[0], length, g.shape[2] // len(offsets))


def _windows_setup(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    x, offsets, _steps = inputs
    ctx.offsets, ctx.length = list(offsets), x.shape[1]


def _windows_backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, None, None]:
    return _adjoint(grad.contiguous(), ctx.offsets, ctx.length), None, None


def _adjoint_setup(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    g, offsets, _length = inputs
    ctx.offsets, ctx.steps = list(offsets), g.shape[1]


def _adjoint_backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, None, None]:
    return _windows(grad.contiguous(), ctx.offsets, ctx.steps), None, None


_windows = CompiledOp("shifted_windows", _windows_op, _windows_impl, _windows_setup,
                      _windows_backward)
_adjoint = CompiledOp("shifted_windows_adjoint", _adjoint_op, _adjoint_impl, _adjoint_setup,
                      _adjoint_backward)


def _uses_kernel(x: Tensor, offsets: list[int], steps: int) -> bool:
    """The compiled copy for contiguous CPU inputs where the kernels are built, outside
    ``torch.compile`` (whose code generator fuses the reference's pad and concatenation
    itself) and ONNX export, from :data:`KERNEL_MIN_BYTES` of output."""
    if x.device.type != "cpu" or torch.compiler.is_compiling():
        return False
    if backend.path("scan", x.device) != backend.KERNEL:
        return False
    out_bytes = x.shape[0] * steps * len(offsets) * x.shape[2] * x.element_size()
    return out_bytes >= KERNEL_MIN_BYTES


def shifted_windows(x: Tensor, offsets: list[int] | tuple[int, ...], steps: int) -> Tensor:
    """The windows of eq 1 for the batch-first input ``x`` ``(B, S, D)``: ``(B, steps, k*D)``,
    block ``j`` of step ``t`` holding ``x[:, t + offsets[j]]`` (zeros outside the input); see the
    module docstring for the path taken."""
    offsets = [int(o) for o in offsets]
    if not offsets:
        raise ValueError("offsets: expected at least one tap")
    if _uses_kernel(x, offsets, steps):
        return _windows(x.contiguous(), offsets, int(steps))
    return shifted_windows_ref(x, offsets, steps)
