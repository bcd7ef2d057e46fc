"""The compiled path against the reference path (``CTRLRNN_BACKEND=reference``) on the same
inputs: what the non-finite and the empty-shape contracts of the ops and of the layers share.

:func:`compare_nonfinite` runs a function forward and backward on both paths, on inputs that hold
NaN, +Inf, -Inf and large finite values (+-1e4) at a few positions, and requires for every output
and every gradient equal NaN, +Inf and -Inf masks and close finite values.

The special values sit in sequences of full length. Past a sequence's length the compiled
kernels write exactly zero gradients (the documented contract: nothing depends on the
padding), whereas the references differentiate ``torch.where(valid, new, old)`` with autograd,
which leaves ``0 * NaN = NaN`` (and ``0 * Inf``) in the gradients of padded steps whenever the
carried state is not finite there; cases with lengths therefore keep their short rows finite
(:func:`rows_padded`).

:func:`both_paths` is the plain version for finite inputs (the empty-shape cases, which run in
subprocesses without pytest's fixtures: it sets the environment variable itself).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
from torch import Tensor

NAN, INF = float("nan"), float("inf")
Poke = tuple[tuple[int, ...], float]
DTYPES = [pytest.param(torch.float32, id="f32"), pytest.param(torch.float64, id="f64")]


def tolerances(dtype: torch.dtype) -> tuple[float, float]:
    """``(rtol, atol)`` of the finite values."""
    return (1e-4, 1e-5) if dtype == torch.float32 else (1e-9, 1e-11)


def poke(x: Tensor, pokes: Sequence[Poke]) -> Tensor:
    """A copy of ``x`` with ``x[idx] = value`` for each poke."""
    x = x.clone()
    for idx, value in pokes:
        x[idx] = value
    return x


def rows_padded(x: Tensor, rows: int) -> Tensor:
    """``x`` with ``rows`` more finite batch rows (the short sequences of the length cases)."""
    g = torch.Generator().manual_seed(99)
    extra = torch.rand((rows, *x.shape[1:]), generator=g, dtype=x.dtype)
    return torch.cat([x, 0.25 + 0.5 * extra], 0)


def flat(out: Any) -> list[Tensor]:
    """The tensors of a nested output (a tensor, or tuples and lists of them), in order."""
    if isinstance(out, Tensor):
        return [out]
    tensors: list[Tensor] = []
    for o in out:
        tensors.extend(flat(o))
    return tensors


def _weighted_backward(
    fn: Callable[..., Any], inputs: Sequence[Tensor | None], params: Sequence[Tensor] = ()
) -> tuple[list[Tensor], list[Tensor | None]]:
    """Outputs of ``fn(*inputs)`` and the gradients of ``sum_k <w_k, out_k>`` (fixed random
    ``w_k``) w.r.t. the floating inputs and ``params``."""
    leaves = [
        x.detach().clone().requires_grad_() if x is not None and x.is_floating_point() else x
        for x in inputs
    ]
    outs = [o for o in flat(fn(*leaves)) if o.requires_grad]
    g = torch.Generator().manual_seed(1234)
    weights = [torch.randn(o.shape, generator=g, dtype=torch.float64).to(o.dtype) for o in outs]
    wrt = [x for x in leaves if isinstance(x, Tensor) and x.requires_grad] + list(params)
    grads = torch.autograd.grad(outs, wrt, weights, allow_unused=True)
    return [o.detach() for o in outs], list(grads)


def assert_parity(got: Tensor | None, want: Tensor | None, name: str) -> None:
    """Equal NaN, +Inf and -Inf masks, close finite values."""
    if got is None or want is None:
        assert got is None and want is None, f"{name}: a gradient is missing on one path only"
        return
    assert got.shape == want.shape, f"{name}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    assert got.dtype == want.dtype, f"{name}: dtype {got.dtype} != {want.dtype}"
    masks: list[tuple[str, Callable[[Tensor], Tensor]]] = [
        ("NaN", torch.isnan),
        ("+Inf", lambda t: t == INF),
        ("-Inf", lambda t: t == -INF),
    ]
    for label, mask in masks:
        mg, mw = mask(got), mask(want)
        if not torch.equal(mg, mw):
            where = (mg != mw).nonzero()[:4].tolist()
            pairs = [(got[tuple(i)].item(), want[tuple(i)].item()) for i in where]
            raise AssertionError(
                f"{name}: {label} masks differ at {where} (compiled, reference) = {pairs}"
            )
    fin = torch.isfinite(want)
    if fin.any():
        rtol, atol = tolerances(want.dtype)
        scale = max(1.0, want[fin].abs().max().item())
        torch.testing.assert_close(
            got[fin], want[fin], rtol=rtol, atol=atol * scale, msg=lambda m: f"{name}: {m}"
        )


def compare_nonfinite(
    monkeypatch: pytest.MonkeyPatch,
    fn: Callable[..., Any],
    inputs: Sequence[Tensor | None],
    *,
    params: Sequence[Tensor] = (),
    expect_finite: bool = True,
) -> None:
    """Run ``fn`` on both paths and compare every output and every gradient (w.r.t. the
    floating inputs and ``params``); NaN must reach the results (the case is not vacuous) and,
    with ``expect_finite``, finite values must remain to compare."""
    monkeypatch.delenv("CTRLRNN_BACKEND", raising=False)
    outs, grads = _weighted_backward(fn, inputs, params)
    monkeypatch.setenv("CTRLRNN_BACKEND", "reference")
    ref_outs, ref_grads = _weighted_backward(fn, inputs, params)
    monkeypatch.delenv("CTRLRNN_BACKEND")
    assert len(outs) == len(ref_outs) and len(grads) == len(ref_grads)
    for k, (x, y) in enumerate(zip(outs, ref_outs, strict=True)):
        assert_parity(x, y, f"output {k}")
    for k, (x, y) in enumerate(zip(grads, ref_grads, strict=True)):
        assert_parity(x, y, f"gradient {k}")
    every = torch.cat([t.flatten().double() for t in outs + [g for g in grads if g is not None]])
    # not vacuous: the special values reached the results, and finite values remain to compare
    assert torch.isnan(every).any()
    if expect_finite:
        assert torch.isfinite(every).any()


def _forward_backward(
    fn: Callable[..., Any], inputs: Sequence[Tensor | None]
) -> tuple[list[Tensor], list[Tensor | None], list[Tensor]]:
    """Outputs of ``fn(*inputs)``, the gradients of ``sum_k <w_k, out_k>`` w.r.t. the floating
    inputs (None where an input does not reach any output) and those inputs."""
    leaves = [
        x.detach().clone().requires_grad_() if x is not None and x.is_floating_point() else x
        for x in inputs
    ]
    outs = flat(fn(*leaves))
    g = torch.Generator().manual_seed(5)
    diff = [o for o in outs if o.requires_grad]
    weights = [torch.randn(o.shape, generator=g, dtype=torch.float64).to(o.dtype) for o in diff]
    wrt = [x for x in leaves if isinstance(x, Tensor) and x.requires_grad]
    grads: list[Tensor | None] = [None] * len(wrt)
    if diff:
        grads = list(torch.autograd.grad(diff, wrt, weights, allow_unused=True))
    return [o.detach() for o in outs], grads, wrt


def both_paths(fn: Callable[..., Any], inputs: Sequence[Tensor | None]) -> list[Tensor]:
    """Run ``fn`` compiled and with ``CTRLRNN_BACKEND=reference``; assert that outputs and
    gradients agree (shapes, dtypes, values); return the compiled outputs."""
    os.environ.pop("CTRLRNN_BACKEND", None)
    outs, grads, wrt = _forward_backward(fn, inputs)
    os.environ["CTRLRNN_BACKEND"] = "reference"
    try:
        ref_outs, ref_grads, _ = _forward_backward(fn, inputs)
    finally:
        os.environ.pop("CTRLRNN_BACKEND", None)
    assert len(outs) == len(ref_outs)
    for k, (x, y) in enumerate(zip(outs, ref_outs, strict=True)):
        assert x.shape == y.shape and x.dtype == y.dtype, (
            f"output {k}: compiled {tuple(x.shape)} {x.dtype}, reference {tuple(y.shape)} {y.dtype}"
        )
        torch.testing.assert_close(x, y, msg=lambda m, k=k: f"output {k}: {m}")
    for k, (x, y, leaf) in enumerate(zip(grads, ref_grads, wrt, strict=True)):
        # a gradient of the input's shape on the compiled path (autograd may give the
        # reference's None where no output depends on the input: zeros)
        assert x is not None, f"gradient {k}: None on the compiled path"
        assert x.shape == leaf.shape and x.dtype == leaf.dtype, f"gradient {k}: {x.shape}"
        torch.testing.assert_close(x, torch.zeros_like(leaf) if y is None else y,
                                   msg=lambda m, k=k: f"gradient {k}: {m}")  # fmt: skip
    return outs
