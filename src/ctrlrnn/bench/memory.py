"""Training memory of one forward+backward pass, measured two ways on CPU.

1. **Saved-tensor bytes** (exact, deterministic): every tensor autograd keeps for the backward
   pass is seen by a :func:`torch.autograd.graph.saved_tensors_hooks` pack hook; the bytes of
   their distinct storages are summed (a storage saved twice, or saved through several views,
   counts once). Parameter storages are left out of that sum and counted separately as
   parameter bytes, so ``train_bytes = saved_bytes + param_bytes`` is the memory a training
   step must hold between its forward and its backward pass. Tensors an op stores outside
   autograd's saving mechanism are invisible to the hook; the RSS measurement below covers them.
2. **Peak RSS delta** (whole process, noisier): the kernel's high-water mark of resident memory
   (``VmHWM``) is reset through ``/proc/self/clear_refs`` before the step (after a garbage
   collection, ``ctrlrnn.empty_cache()`` and glibc's ``malloc_trim``, so freed memory is not
   counted and the step's outputs are allocated afresh), and the delta is
   ``VmHWM after - VmRSS before``. It includes temporaries, gradients and allocator slack. Where
   ``/proc`` does not allow the reset it is reported as None.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from ctrlrnn.ops.output_cache import empty_cache
from ctrlrnn.timing import Outputs, differentiable_outputs

RSS_METHOD = (
    "VmHWM reset via /proc/self/clear_refs after gc, ctrlrnn.empty_cache and malloc_trim, "
    "delta = VmHWM(after fwd+bwd) - VmRSS(before)"
)
SAVED_METHOD = (
    "distinct storages packed by torch.autograd.graph.saved_tensors_hooks during the forward, "
    "excluding parameters; plus parameter bytes"
)


@dataclass
class MemoryUse:
    """Memory of one training step (see the module docstring for the two methods).

    Attributes:
        saved_bytes: bytes of distinct non-parameter storages saved for backward.
        param_bytes: bytes of the parameters.
        train_bytes: ``saved_bytes + param_bytes``.
        saved_tensors: how many tensors the pack hook saw (before de-duplication).
        peak_rss_delta_bytes: process peak-RSS growth during forward+backward, or None.
    """

    saved_bytes: int
    param_bytes: int
    train_bytes: int
    saved_tensors: int
    peak_rss_delta_bytes: int | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


def _status_kb(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _malloc_trim() -> None:
    """Return freed heap memory to the OS (glibc), so the RSS baseline is not inflated by memory
    an earlier measurement freed but the allocator kept."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _storage_key(t: torch.Tensor) -> tuple[str, int]:
    return (str(t.device), t.untyped_storage().data_ptr())


def measure_training_memory(
    fn: Callable[[], Outputs],
    params: Sequence[torch.Tensor],
    leaves: Sequence[torch.Tensor] = (),
) -> MemoryUse:
    """Run ``fn()`` with autograd and backward once; return the memory it used.

    Args:
        fn: builds the outputs (as for :func:`ctrlrnn.bench.timing.time_forward_backward`).
        params: the parameters (counted once as ``param_bytes``, excluded from saved bytes).
        leaves: tensors whose ``.grad`` is reset to None before the step (and freed after).
    """
    param_keys = {_storage_key(p) for p in params}
    param_bytes = sum(p.untyped_storage().nbytes() for p in {id(p): p for p in params}.values())
    saved: dict[tuple[str, int], int] = {}
    count = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal count
        count += 1
        key = _storage_key(t)
        if key not in param_keys:
            saved[key] = max(saved.get(key, 0), t.untyped_storage().nbytes())
        return t

    def unpack(t: torch.Tensor) -> torch.Tensor:
        return t

    for leaf in leaves:
        leaf.grad = None
    gc.collect()
    empty_cache()
    _malloc_trim()
    can_reset = _reset_peak_rss()
    rss_before = _status_kb("VmRSS")
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        outs = differentiable_outputs(fn())
    if not outs:
        raise ValueError("fn: returned no output that requires grad; nothing to backward")
    gen = torch.Generator().manual_seed(1234)
    grads = [torch.randn(o.shape, generator=gen).to(o.dtype) for o in outs]
    torch.autograd.backward(outs, grads)
    hwm_after = _status_kb("VmHWM")
    del outs, grads
    for leaf in leaves:
        leaf.grad = None
    rss_delta = None
    if can_reset and rss_before is not None and hwm_after is not None:
        rss_delta = max(0, hwm_after - rss_before) * 1024
    saved_bytes = sum(saved.values())
    return MemoryUse(
        saved_bytes=saved_bytes,
        param_bytes=param_bytes,
        train_bytes=saved_bytes + param_bytes,
        saved_tensors=count,
        peak_rss_delta_bytes=rss_delta,
    )


def linear_fit(xs: Sequence[float], ys: Sequence[float]) -> dict[str, float]:
    """Least-squares ``y = slope*x + intercept`` with its coefficient of determination ``r2``."""
    n = len(xs)
    if n != len(ys) or n < 2:
        raise ValueError(f"xs, ys: expected two equal-length sequences of >= 2, got {n}, {len(ys)}")
    mx = sum(xs) / n
    my = sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        raise ValueError("xs: all equal; a line cannot be fitted")
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    slope = sxy / sxx
    intercept = my - slope * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - (slope * x + intercept)) ** 2 for x, y in zip(xs, ys, strict=True))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    return {"slope": slope, "intercept": intercept, "r2": r2}
