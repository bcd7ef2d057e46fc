"""What the case builders share: the input batch, a module's workload, and looking up
ctrlrnn's layers, ops and active backends by name."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

import ctrlrnn
from ctrlrnn import nn as ctrlrnn_nn
from ctrlrnn import ops as ctrlrnn_ops
from ctrlrnn.bench.case_registry import CaseUnavailable, Cost, Point, Workload


def make_input(p: Point, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """A batch-first ``(batch, length, width)`` input that requires grad, from ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(p.batch, p.length, p.width, generator=gen).to(dtype).requires_grad_(True)


def module_workload(
    m: nn.Module, x: torch.Tensor, flops: Cost, nbytes: Cost, **info: Any
) -> Workload:
    """The workload of ``m(x)[0]``: ``x`` and the trainable parameters are the leaves."""
    params = [q for q in m.parameters() if q.requires_grad]
    return Workload(
        fn=lambda: m(x)[0],
        flops=flops,
        bytes=nbytes,
        leaves=[x, *params],
        params=params,
        info=dict(info),
    )


def require(attr: str) -> Any:
    """``ctrlrnn.<attr>``, else ``ctrlrnn.ops.<attr>`` / ``ctrlrnn.nn.<attr>``;
    :class:`CaseUnavailable` when none has it."""
    for mod in (ctrlrnn, ctrlrnn_ops, ctrlrnn_nn):
        if hasattr(mod, attr):
            return getattr(mod, attr)
    raise CaseUnavailable(f"ctrlrnn.{attr} is not available in this ctrlrnn")


def backend_info() -> dict[str, Any] | str:
    """``ctrlrnn.backend_info()``, or the reason it could not be called."""
    try:
        return dict(require("backend_info")())
    except Exception as exc:  # noqa: BLE001 - reported, not hidden
        return f"unavailable: {type(exc).__name__}: {exc}"


def family_backend(family: str, device: str = "cpu") -> str:
    """The active backend of one op family (e.g. ``"compiled"`` or ``"reference"`` for
    ``"scan"``) as ``ctrlrnn.backend_info()`` reports it; the whole report when it has no such
    entry."""
    info = backend_info()
    if isinstance(info, dict):
        fam = info.get("families", {}).get(family)
        if isinstance(fam, dict) and device in fam:
            return str(fam[device])
    return str(info)
