"""Whole cell steps in one op each on CPU, for steps where no autograd graph is recorded
(decoding one token at a time) and, keeping what a backward reads, for the steps of
:mod:`ctrlrnn.ops.cell_step_grads`, which record one: ``qrnn_cell_step`` (QRNN eq 1-5),
``rcrn_cell_step`` (RCRN eq 1-16, LSTM cells), ``carnn_cell_step`` (CARNN eq 3, 5, 6),
``metagross_cell_step`` (METAGROSS eq 2-1..2-6, a linear base and token depth gates),
``metagross_printed_step`` (the same as printed, gates from ``h_{t-1}``) and
``caslstm_cell_step`` (CAS-LSTM eq 1-6, or 7-13 and 17), the ``scan`` extension's kernels
(``cell_steps.cpp``).

A cell's step written with tensor ops is a dozen or more dispatcher calls, each with its
output allocated, around products of a few thousand multiply-adds; the op is one call. Its
readable twin is :mod:`ctrlrnn.ops.cell_steps.reference`, which the tests hold it to.

:func:`kernels` says whether a step may take the op, and gives the extension when it may: on
CPU, float32 or float64, a batch of at most :data:`MAX_BATCH` rows, every tensor contiguous and
of the input's dtype, grad disabled (``torch.no_grad``, ``torch.inference_mode``; not asked
for a step that records its graph, ``graph=True``), no
forward-mode AD, no autocast, no ``torch.func`` transform, nothing tracing or exporting, and the
compiled kernels in use (none under ``CTRLRNN_BACKEND=reference``). Everywhere else the cell
runs its written-out step.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ctrlrnn.ops import scan_export
from ctrlrnn.ops.backend import cpu_extension, functorch_active
from ctrlrnn.ops.cell_steps.reference import (
    carnn_cell_step_ref,
    caslstm_cell_step_ref,
    metagross_cell_step_ref,
    metagross_printed_step_ref,
    qrnn_cell_step_ref,
    rcrn_cell_step_ref,
)
from ctrlrnn.ops.compiled_op import eager_ok

__all__ = ["MAX_BATCH", "carnn_cell_step_ref", "caslstm_cell_step_ref", "kernels", "plain",
           "metagross_cell_step_ref", "metagross_printed_step_ref", "qrnn_cell_step_ref",
           "rcrn_cell_step_ref"]

#: The largest batch the ops take: they compute row by row, reading the weights once per row,
#: which a GEMM over the batch beats at larger batches.
MAX_BATCH = 4

_DTYPES = (torch.float32, torch.float64)
#: Tensor types that hold their data (tracers' and transforms' subclasses take the cell's step).
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def plain(tensors: list[Tensor | None]) -> bool:
    """Whether ``tensors`` (a step's weights, None for an absent one) are all tensors that hold
    their data (no tracer's or transform's subclass): what :func:`kernels` asks of weights that
    an op makes contiguous itself and checks for dtype and device (``rcrn_cell_step``), at a
    fraction of the cost of its full questions."""
    return all(t is None or type(t) in _PLAIN for t in tensors)


def kernels(x: Tensor, *tensors: Tensor | None, graph: bool = False) -> Any | None:
    """The ``scan`` extension when a step on input ``x`` ``(B, D)`` with the other operands
    ``tensors`` (states and parameters; None for an absent one) may take a fused step op (module
    docstring), else None. ``graph``: for a step that records its autograd graph through
    :mod:`ctrlrnn.ops.cell_step_grads` (grad enabled is then no reason to refuse). The cheapest
    questions come first: a step asks at every call."""
    if (torch.is_grad_enabled() and not graph) or not x.is_cpu or x.dtype not in _DTYPES:
        return None
    if x.shape[0] > MAX_BATCH or type(x) not in _PLAIN or not x.is_contiguous():
        return None
    dtype, types = x.dtype, _PLAIN
    for t in tensors:  # (dtypes are singletons: identity is their equality, and cheaper)
        if t is not None and (t.dtype is not dtype or type(t) not in types
                              or not t.is_contiguous()):  # fmt: skip
            return None
    if getattr(torch.autograd.forward_ad, "_current_level", -1) >= 0:
        return None
    if torch.is_autocast_enabled("cpu") or not eager_ok() or functorch_active():
        return None
    if scan_export.active():
        return None
    return cpu_extension("scan")
