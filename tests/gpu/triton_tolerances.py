"""How close a Triton kernel's result must be to the float64 reference, per input dtype; and the
NaN / +-Inf parity of the non-finite cases (equal masks, close finite values)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

NAN, INF = float("nan"), float("inf")
Poke = tuple[tuple[int, ...], float]


def tol(dtype: torch.dtype) -> dict[str, float]:
    if dtype in (torch.float16, torch.bfloat16):
        return dict(rtol=3e-2, atol=3e-2)
    if dtype == torch.float64:
        return dict(rtol=1e-10, atol=1e-10)
    return dict(rtol=1e-5, atol=1e-5)


def close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype,
          name: str = "") -> None:
    """``actual`` has ``dtype`` and equals ``expected`` within :func:`tol` (``name``: which)."""
    assert actual.dtype == dtype, name
    torch.testing.assert_close(actual.double(), expected.double(), msg=name or None,
                               **tol(dtype))


def poke(x: Tensor | None, pokes: Sequence[Poke]) -> Tensor | None:
    """A copy of ``x`` with ``x[idx] = value`` for each poke (None stays None)."""
    if x is None:
        return None
    x = x.clone()
    for idx, value in pokes:
        x[idx] = value
    return x


def parity(got: Tensor, want: Tensor, name: str) -> None:
    """Equal NaN, +Inf and -Inf masks, close finite values (float32)."""
    assert got.shape == want.shape and got.dtype == want.dtype, name
    masks: list[tuple[str, Callable[[Tensor], Tensor]]] = [
        ("NaN", torch.isnan), ("+Inf", lambda t: t == INF), ("-Inf", lambda t: t == -INF),
    ]  # fmt: skip
    for label, mask in masks:
        mg, mw = mask(got), mask(want)
        assert torch.equal(mg, mw), f"{name}: {label} masks differ at {(mg != mw).nonzero()[:4]}"
    fin = torch.isfinite(want)
    scale = max(1.0, want[fin].abs().max().item()) if fin.any() else 1.0
    torch.testing.assert_close(got[fin], want[fin], rtol=1e-4, atol=1e-5 * scale, msg=name)


def weights(*tensors: Tensor) -> list[Tensor]:
    """Fixed random weights of the outputs' gradients, one per tensor."""
    g = torch.Generator().manual_seed(11)
    return [torch.randn(t.shape, generator=g) for t in tensors]
