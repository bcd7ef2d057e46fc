"""``x W^T + b`` into a block of the compiled kernels' output cache (``ops/csrc/runtime/pool.h``),
its GEMMs on the path measured fastest for their shape (:mod:`ctrlrnn.ops.gemm_path`).

The input projection of a recurrent layer — a QRNN's gates (QRNN paper eq 1-2), a METAGROSS
level's base pre-activations (METAGROSS paper section 2.2), the input half of an LSTM's gates —
is often the largest tensor of a step, and its GEMM the largest cost. Above glibc's mmap
threshold a fresh tensor of that size page-faults on every first write, every step; the cached
block does not. The GEMMs, forward and backward (``dx = g W``, ``dW = g^T x``), run on torch's
BLAS or on oneDNN, whichever measured faster for their shape class on this CPU.

:func:`cached_linear_grouped` is the same product for the input projections of ``K``
independent recurrences that read one input (a METAGROSS unit's base RNNs, section 2.2): its
output is laid out recurrence first, ``(K, ..., N / K)``, each recurrence's block contiguous as
the cell kernels read it, without a permuted copy of the ``(..., N)`` output forward or of its
gradient backward.

:func:`cached_linear_stacked` is the input projections of ``R`` independent recurrences with their
own weights, laid out ``(R, ..., N)`` as the cell kernels take a stack of recurrences, where
groups of consecutive recurrences read one input (RCRN's three RNNs of a direction, eq 1-14):
one product per recurrence on the chosen path, no copy of an input per reader, and each input's
gradient summed over its readers by accumulation. :func:`cached_linear_each` is its form for a
list of inputs, weights and biases (the two directions of a bidirectional layer), returning
views of the one block.

Small products take ``F.linear`` (and its layout for the grouped one) in eager mode: below
:data:`SMALL_MACS` multiply-adds with an output under the cache's 1 MiB minimum, the cache does
not apply, and the custom op's own dispatch and Python backward, a fixed cost per call, outweigh
what the GEMM path choice saves on so little work. BENCHMARKS.md's small-shape rows measure it.
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

__all__ = ["cached_linear", "cached_linear_each", "cached_linear_grouped", "cached_linear_stacked"]

#: Below this many multiply-adds (rows x input features x output features), with an output under
#: :data:`CACHE_MIN_BYTES`, an eager call takes ``F.linear`` (module docstring).
SMALL_MACS = 1 << 24
#: The output cache's smallest block (``kMinPooledBytes`` in ``ops/csrc/runtime/pool.h``).
CACHE_MIN_BYTES = 1 << 20

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


def _linear_grads(ctx: Any, grad: Tensor, groups: int) -> tuple[Tensor | None, ...]:
    """``(dx, dW, db)`` of ``x W^T + b`` whose output features come as ``groups`` blocks laid
    out block first (one block: :func:`cached_linear`'s own layout): ``dx = sum_k g_k W_k``,
    ``dW_k = g_k^T x``, ``db_k = sum g_k``, each product on the chosen GEMM path."""
    x, weight = ctx.saved_tensors
    rows = x.shape[:-1].numel()  # not -1 in reshape: ambiguous for empty tensors (N or D = 0)
    n = weight.shape[0] // groups
    g3 = grad.reshape(groups, rows, n)
    blocks = [weight[k * n : (k + 1) * n] for k in range(groups)]
    need_x, need_w, need_b = ctx.needs_input_grad[:3]
    dx = dw = None
    if need_x:
        dx = _matmul(g3[0], blocks[0])
        for k in range(1, groups):
            dx = dx + _matmul(g3[k], blocks[k])
        dx = dx.view(x.shape)
    if need_w:
        x2 = x.reshape(rows, x.shape[-1])
        parts = [_matmul(g3[k].t(), x2) for k in range(groups)]
        dw = parts[0] if groups == 1 else torch.cat(parts)
    db = g3.sum(1).reshape(groups * n) if (ctx.has_bias and need_b) else None
    return dx, dw, db


def _backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
    return _linear_grads(ctx, grad, 1)


_cached_linear_op.register_autograd(_backward, setup_context=_setup_context)


def _small(x: Tensor, weight: Tensor) -> bool:
    """Whether ``x W^T`` is small enough for ``F.linear`` in eager mode (module docstring);
    never under ``torch.compile``, whose graphs keep one decision for every shape."""
    if torch.compiler.is_compiling():
        return False
    rows = x.shape[:-1].numel()
    out_bytes = rows * weight.shape[0] * x.element_size()
    return rows * x.shape[-1] * weight.shape[0] < SMALL_MACS and out_bytes < CACHE_MIN_BYTES


def _uses_cache(x: Tensor, weight: Tensor) -> bool:
    """Contiguous CPU tensors with the compiled extension built take the custom op (a constant
    decision under ``torch.compile``, see :func:`ctrlrnn.ops.backend.has_kernel`), but for
    small products in eager mode (:func:`_small`)."""
    cached = x.device.type == "cpu" and x.is_contiguous() and has_kernel("scan", x.device)
    cached = cached and autocast_dtype(x.device) is None  # autocast: F.linear in its dtype
    cached = cached and not scan_export.active()  # ONNX export: a plain F.linear
    return cached and not _small(x, weight)


def cached_linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``F.linear(x, weight, bias)``, its output in a cached block on CPU (module docstring);
    ``F.linear`` itself elsewhere (CUDA, non-contiguous ``x``, no compiled extension, small
    products)."""
    if not _uses_cache(x, weight):
        return F.linear(x, weight, bias)
    return _cached_linear_op(x, weight, bias)


@torch.library.custom_op("ctrlrnn::cached_linear_grouped", mutates_args=())
def _cached_linear_grouped_op(x: Tensor, weight: Tensor, bias: Tensor | None,
                              groups: int) -> Tensor:
    ext = kernel_for("scan", x.device)
    if ext is not None and x.device.type == "cpu":
        return ext.cached_linear_grouped(x, weight, bias, groups)
    return _grouped_reference(x, weight, bias, groups)


@_cached_linear_grouped_op.register_fake
def _(x, weight, bias, groups):
    return x.new_empty(groups, *x.shape[:-1], weight.shape[0] // groups)


def _grouped_reference(x: Tensor, weight: Tensor, bias: Tensor | None, groups: int) -> Tensor:
    """``F.linear`` with its last dimension split into ``groups`` blocks, moved to the front."""
    out = F.linear(x, weight, bias)
    return out.unflatten(-1, (groups, -1)).movedim(-2, 0).contiguous()


def _setup_grouped(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    x, weight, bias, groups = inputs
    ctx.save_for_backward(x, weight)
    ctx.has_bias, ctx.groups = bias is not None, groups


def _backward_grouped(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
    return (*_linear_grads(ctx, grad, ctx.groups), None)


_cached_linear_grouped_op.register_autograd(_backward_grouped, setup_context=_setup_grouped)


def cached_linear_grouped(x: Tensor, weight: Tensor, bias: Tensor | None, groups: int) -> Tensor:
    """``F.linear(x, weight, bias)`` as ``groups`` blocks of its output features, laid out
    ``(groups, ..., N / groups)`` (module docstring), in a cached block on CPU; elsewhere the
    same layout from ``F.linear``. ``groups`` must divide ``weight``'s rows."""
    if groups < 1 or weight.shape[0] % groups:
        raise ValueError(f"groups: {groups} must be a positive divisor of the weight's "
                         f"{weight.shape[0]} rows")
    if not _uses_cache(x, weight):
        return _grouped_reference(x, weight, bias, groups)
    return _cached_linear_grouped_op(x, weight, bias, groups)


@torch.library.custom_op("ctrlrnn::cached_linear_stacked", mutates_args=())
def _cached_linear_stacked_op(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    ext = kernel_for("scan", x.device)
    if ext is not None and x.device.type == "cpu":
        return ext.cached_linear_stacked(x, weight, bias)
    return _stacked_reference(x, weight, bias)


@_cached_linear_stacked_op.register_fake
def _(x, weight, bias):
    return x.new_empty(weight.shape[0], x.shape[1], weight.shape[1])


def _stacked_reference(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``out[r] = x[r // (R // G)] @ weight[r].T + bias[r]``: each input repeated for its readers
    (an expanded view), one batched product."""
    R, G = weight.shape[0], x.shape[0]
    inputs = x.unsqueeze(1).expand(G, R // G, *x.shape[1:]).reshape(R, *x.shape[1:])
    if bias is None:
        return torch.bmm(inputs, weight.transpose(1, 2))
    return torch.baddbmm(bias.unsqueeze(1), inputs, weight.transpose(1, 2))


def _setup_stacked(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    x, weight, bias = inputs
    ctx.save_for_backward(x, weight)
    ctx.has_bias = bias is not None


def _backward_stacked(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
    """``dx_g = sum over the readers r of x_g of grad_r W_r``, ``dW_r = grad_r^T x_g``,
    ``db_r = sum grad_r``, each product on the chosen GEMM path."""
    x, weight = ctx.saved_tensors
    R, G = weight.shape[0], x.shape[0]
    per = R // G
    need_x, need_w, need_b = ctx.needs_input_grad[:3]
    dx = dw = None
    if need_x:
        parts = []
        for g in range(G):
            acc = _matmul(grad[g * per], weight[g * per])
            for r in range(g * per + 1, (g + 1) * per):
                acc = acc + _matmul(grad[r], weight[r])
            parts.append(acc)
        dx = torch.stack(parts)
    if need_w:
        dw = torch.stack([_matmul(grad[r].t(), x[r // per]) for r in range(R)])
    db = grad.sum(1) if (ctx.has_bias and need_b) else None
    return dx, dw, db


_cached_linear_stacked_op.register_autograd(_backward_stacked, setup_context=_setup_stacked)


def cached_linear_stacked(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """The input projections of ``R`` recurrences read by groups (module docstring): ``x``
    ``(G, rows, D)``, ``weight`` ``(R, N, D)``, ``bias`` ``(R, N)`` or None, ``G`` dividing
    ``R``; returns ``(R, rows, N)`` with ``out[r] = x[r // (R // G)] @ weight[r].T + bias[r]``,
    in a cached block on CPU (:func:`cached_linear`'s conditions, on one reader's product);
    elsewhere the same from one batched product."""
    if x.dim() != 3 or weight.dim() != 3 or x.shape[-1] != weight.shape[-1]:
        raise ValueError(f"x, weight: expected (G, rows, D) and (R, N, D), got {tuple(x.shape)} "
                         f"and {tuple(weight.shape)}")
    if x.shape[0] < 1 or weight.shape[0] % x.shape[0]:
        raise ValueError(f"weight: its {weight.shape[0]} recurrences must be a multiple of the "
                         f"{x.shape[0]} inputs of x")
    if bias is not None and tuple(bias.shape) != tuple(weight.shape[:2]):
        raise ValueError(f"bias: expected {tuple(weight.shape[:2])}, got {tuple(bias.shape)}")
    if not _uses_cache(x[0], weight[0]):
        return _stacked_reference(x, weight, bias)
    return _cached_linear_stacked_op(x, weight, bias)


def cached_linear_each(
    xs: list[Tensor], weights: list[Tensor], biases: list[Tensor | None]
) -> list[Tensor]:
    """``[F.linear(x, w, b) for x, w, b in zip(xs, weights, biases)]`` (inputs of one shape,
    weights of one shape, biases all given or all None) as views of one stacked block, by
    :func:`cached_linear_stacked`: the input projections of independent recurrences (the two
    directions of a bidirectional layer) that the cell kernels then take stacked without a copy
    of the projections (``stack_or_base`` in ``ops/cells/shell.py``). The inputs are stacked
    once (no copy where they already are consecutive slices of one tensor, as the outputs of the
    layer below are)."""
    from ctrlrnn.ops.cells.shell import stack_or_base

    if not (len(xs) == len(weights) == len(biases)) or not xs:
        raise ValueError(f"xs, weights, biases: expected one of each per recurrence, got "
                         f"{len(xs)}, {len(weights)}, {len(biases)}")
    given = [b is not None for b in biases]
    if any(given) and not all(given):
        raise ValueError("biases: given for some recurrences and None for others")
    if len(xs) == 1 or not _uses_cache(xs[0], weights[0]):
        # where the cached op does not apply (CUDA, autocast, export, small products): one
        # projection each, as F.linear traces and exports them
        return [cached_linear(x, w, b) for x, w, b in zip(xs, weights, biases, strict=True)]
    lead = xs[0].shape[:-1]
    x = stack_or_base([xi.reshape(-1, xi.shape[-1]) for xi in xs])
    bias = torch.stack(biases) if all(given) else None  # type: ignore[arg-type]
    out = cached_linear_stacked(x, torch.stack(weights), bias)
    return list(out.view(len(xs), *lead, out.shape[-1]).unbind(0))
