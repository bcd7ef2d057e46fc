"""``x W^T + b`` into a block of the compiled kernels' output cache (``ops/csrc/output_pool.h``),
its GEMMs on the path measured fastest for their shape (:mod:`ctrlrnn.ops.gemm_path`).

The input projection of a recurrent layer — a QRNN's gates (QRNN paper eq 1-2), a METAGROSS
level's base pre-activations (METAGROSS paper section 2.2), the input half of an LSTM's gates —
is often the largest tensor of a step, and its GEMM the largest cost. Above glibc's mmap
threshold a fresh tensor of that size page-faults on every first write, every step; the cached
block does not. The GEMMs, forward and backward (``dx = g W``, ``dW = g^T x``), run on torch's
BLAS or on oneDNN, whichever measured faster for their shape class on this CPU.
"""

# No `from __future__ import annotations`: torch 2.4's custom_op reads the annotations of the
# functions it registers as written, and cannot parse them as strings.

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ctrlrnn.ops import scan_export
from ctrlrnn.ops.autocast import autocast_dtype
from ctrlrnn.ops.backend import has_kernel, kernel_for

__all__ = ["cached_linear"]

#: Tensor types that hold their data, as opposed to the tracers' subclasses (:func:`_matmul`).
_PLAIN = (torch.Tensor, torch.nn.Parameter)


@torch.library.custom_op("ctrlrnn::cached_linear", mutates_args=())
def _cached_linear_op(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    ext = kernel_for("scan", x.device)
    if ext is not None and x.device.type == "cpu":
        return ext.cached_linear(x, weight, bias)
    return F.linear(x, weight, bias)


@_cached_linear_op.register_fake
def _(x, weight, bias):
    return x.new_empty(*x.shape[:-1], weight.shape[0])


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    x, weight, bias = inputs
    ctx.save_for_backward(x, weight)
    ctx.has_bias = bias is not None


def _matmul(a: Tensor, b: Tensor) -> Tensor:
    """``a @ b`` on the GEMM path chosen for its shape (compiled kernels), else torch's (also
    under ``create_graph=True``: the double backward needs a differentiable product)."""
    # traced backwards (torch.compile, make_fx) see tensor subclasses (fake, functional) that
    # hold no data: they take torch's product, which the tracer records. A parameter holds its
    # data (the saved weight of ``dx = g W`` is one): it takes the chosen path.
    plain = type(a) in _PLAIN and type(b) in _PLAIN
    ext = kernel_for("scan", a.device) if plain and a.device.type == "cpu" else None
    float32 = a.dtype == torch.float32 and b.dtype == torch.float32
    if ext is None or not float32 or torch.is_grad_enabled():
        return a @ b
    return ext.gemm(a, b)


def _backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
    x, weight = ctx.saved_tensors
    rows = x.shape[:-1].numel()  # not -1 in reshape: ambiguous for empty tensors (N or D = 0)
    g2 = grad.reshape(rows, weight.shape[0])
    need_x, need_w, need_b = ctx.needs_input_grad
    dx = _matmul(g2, weight).view(x.shape) if need_x else None
    dw = _matmul(g2.t(), x.reshape(rows, x.shape[-1])) if need_w else None
    db = g2.sum(0) if (ctx.has_bias and need_b) else None
    return dx, dw, db


_cached_linear_op.register_autograd(_backward, setup_context=_setup_context)


def _uses_cache(x: Tensor) -> bool:
    """Contiguous CPU tensors with the compiled extension built take the custom op (a constant
    decision under ``torch.compile``, see :func:`ctrlrnn.ops.backend.has_kernel`)."""
    cached = x.device.type == "cpu" and x.is_contiguous() and has_kernel("scan", x.device)
    cached = cached and autocast_dtype(x.device) is None  # autocast: F.linear in its dtype
    return cached and not scan_export.active()  # ONNX export: a plain F.linear


def cached_linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``F.linear(x, weight, bias)``, its output in a cached block on CPU (module docstring);
    ``F.linear`` itself elsewhere (CUDA, non-contiguous ``x``, no compiled extension)."""
    if not _uses_cache(x):
        return F.linear(x, weight, bias)
    return _cached_linear_op(x, weight, bias)
