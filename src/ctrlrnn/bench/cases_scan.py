"""Benchmark rows of the linear scan ``h_t = a_t * h_{t-1} + b_t``: ctrlrnn's compiled scan and
its reference against the same recurrence written as a Python loop with autograd."""

from __future__ import annotations

import torch

from ctrlrnn.bench.case_registry import Cost, Point, Workload, case
from ctrlrnn.bench.costs import SCAN_ELEMENT_VALUES, per_unit_bytes
from ctrlrnn.bench.grids import SCAN_FULL, SCAN_INDEXED_FULL, SCAN_LOOP_FULL, SCAN_QUICK
from ctrlrnn.bench.workloads import family_backend, require


def _scan_inputs(p: Point, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    a = torch.rand(p.batch, p.length, p.width, generator=gen).to(dtype).requires_grad_(True)
    b = torch.randn(p.batch, p.length, p.width, generator=gen).to(dtype).requires_grad_(True)
    return a, b


def _scan_bytes(p: Point, dtype: torch.dtype) -> Cost:
    fwd, bwd = SCAN_ELEMENT_VALUES
    return per_unit_bytes(p, p.width, dtype, fwd=fwd, bwd=bwd)


def scan_python_loop(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``h_t = a_t * h_{t-1} + b_t`` over dim 1 of batch-first ``(B, T, C)`` tensors, written
    the obvious way, ``h = a[:, t] * h + b[:, t]``, with autograd recording every step.

    Its backward is slow beyond the per-step overhead: the gradient of each ``a[:, t]`` slice
    is materialised by autograd as a full ``(B, T, C)`` zero tensor with one slice filled, so
    the backward moves O(T^2 * B * C) bytes. :func:`scan_python_loop_unbind` avoids that.
    """
    h = torch.zeros_like(a[:, 0])
    hs = []
    for t in range(a.shape[1]):
        h = a[:, t] * h + b[:, t]
        hs.append(h)
    return torch.stack(hs, dim=1)


def scan_python_loop_unbind(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The same loop over ``a.unbind(1)`` and ``b.unbind(1)``: autograd stacks the per-step
    gradients once, so the backward is O(T * B * C), only the per-step overhead remains."""
    h = torch.zeros_like(a[:, 0])
    hs = []
    for at, bt in zip(a.unbind(1), b.unbind(1), strict=True):
        h = at * h + bt
        hs.append(h)
    return torch.stack(hs, dim=1)


@case(
    "scan_loop",
    group="scan",
    quick=SCAN_QUICK,
    full=SCAN_INDEXED_FULL,
    compare_to=(),
    warmup=0,
    max_repeats=3,
    min_repeats=1,
    description="linear scan as a Python loop with autograd, h = a[:, t] * h + b[:, t]",
)
def scan_loop(p: Point, dtype: torch.dtype) -> Workload:
    """The Python-loop linear scan (indexing), the comparison row for the compiled one."""
    a, b = _scan_inputs(p, dtype)
    return Workload(
        fn=lambda: scan_python_loop(a, b),
        flops=Cost(0.0, 0.0),
        bytes=_scan_bytes(p, dtype),
        leaves=[a, b],
    )


@case(
    "scan_loop_unbind",
    group="scan",
    quick=SCAN_QUICK,
    full=SCAN_LOOP_FULL,
    compare_to=(),
    description="the same Python loop over a.unbind(1), b.unbind(1) (no O(T^2) backward)",
)
def scan_loop_unbind(p: Point, dtype: torch.dtype) -> Workload:
    """The Python-loop linear scan over unbound time steps, a fairer loop baseline."""
    a, b = _scan_inputs(p, dtype)
    return Workload(
        fn=lambda: scan_python_loop_unbind(a, b),
        flops=Cost(0.0, 0.0),
        bytes=_scan_bytes(p, dtype),
        leaves=[a, b],
    )


@case(
    "scan_compiled",
    group="scan",
    quick=SCAN_QUICK,
    full=SCAN_FULL,
    compare_to=("scan_loop", "scan_loop_unbind"),
    description="ctrlrnn.linear_scan (compiled backend), batch-first (B, T, C)",
)
def scan_compiled(p: Point, dtype: torch.dtype) -> Workload:
    """``ctrlrnn.linear_scan(a, b)`` with the active (compiled) backend."""
    linear_scan = require("linear_scan")
    a, b = _scan_inputs(p, dtype)
    return Workload(
        fn=lambda: linear_scan(a, b),
        flops=Cost(0.0, 0.0),
        bytes=_scan_bytes(p, dtype),
        leaves=[a, b],
        info={"backend": family_backend("scan")},
    )


@case(
    "scan_ref",
    group="scan",
    quick=(),
    full=SCAN_INDEXED_FULL,
    compare_to=("scan_loop", "scan_loop_unbind"),
    description="ctrlrnn.ops.linear_scan_ref (the readable reference implementation)",
)
def scan_ref(p: Point, dtype: torch.dtype) -> Workload:
    """``ctrlrnn.ops.linear_scan_ref(a, b)``."""
    linear_scan_ref = require("linear_scan_ref")
    a, b = _scan_inputs(p, dtype)
    return Workload(
        fn=lambda: linear_scan_ref(a, b),
        flops=Cost(0.0, 0.0),
        bytes=_scan_bytes(p, dtype),
        leaves=[a, b],
    )
