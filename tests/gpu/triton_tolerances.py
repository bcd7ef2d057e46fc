"""How close a Triton kernel's result must be to the float64 reference, per input dtype."""

from __future__ import annotations

import torch


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
