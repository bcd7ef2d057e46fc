"""NaN/+-Inf parity and empty shapes of the Triton kernels, in Triton's CPU interpreter (issue 14).

As ``test_triton_interpret.py``: ``conftest.py`` sets ``TRITON_INTERPRET=1``, the launchers run
on CPU tensors and are compared with the references differentiated by autograd. Inputs hold
NaN, +Inf, -Inf and +-1e4 at a few positions; the NaN, +Inf and -Inf masks of every output and
gradient must equal the reference's and the finite values be close.

The chunked scans (summary pass, scan over chunk carries, apply pass) combine chunks as
``h_in(k+1) = P_k h_in(k) + S_k`` from a zero start inside each chunk, which is exact for finite
values and for NaN anywhere, but not IEEE-exact when a decay factor ``a`` of the linear scan is
infinite (``inf * 0`` of the zero start, or the sign of ``inf * h``): their cases put the
infinities in ``b`` and ``h0`` only (see the docstring of :mod:`ctrlrnn.ops.gpu.scan_triton`).
QRNN pooling's decays lie in ``[0, 1]``, so its chunked variant takes every special value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
import torch
from torch import Tensor

pytest.importorskip("triton", reason="triton is not installed (pip install 'ctrlrnn[gpu]')")

import kernel_routes as cells_triton  # noqa: E402
from kernel_routes import triton_cells  # noqa: E402,F401

from ctrlrnn import linear_scan_ref  # noqa: E402
from ctrlrnn.ops import cells_ref  # noqa: E402
from ctrlrnn.ops.gpu.qrnn_triton import qrnn_pooling_backward, qrnn_pooling_forward  # noqa: E402
from ctrlrnn.ops.gpu.scan_triton import linear_scan_backward, linear_scan_forward  # noqa: E402
from ctrlrnn.ops.qrnn_pooling import GATES_PER_MODE, POOLING_MODES, qrnn_pooling_ref  # noqa: E402

# the interpreter computes with numpy, which warns about the overflows and NaNs asked for here
pytestmark = [
    pytest.mark.usefixtures("triton_cells"),
    pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
]

NAN, INF = float("nan"), float("inf")
B, T, H = 3, 7, 5
Poke = tuple[tuple[int, ...], float]


def _poke(x: Tensor, pokes: Sequence[Poke]) -> Tensor:
    x = x.clone()
    for idx, value in pokes:
        x[idx] = value
    return x


def _parity(got: Tensor, want: Tensor, name: str) -> None:
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


def _weights(*tensors: Tensor) -> list[Tensor]:
    g = torch.Generator().manual_seed(11)
    return [torch.randn(t.shape, generator=g) for t in tensors]


# ------------------------------------------------------------------------------------------------
# linear scan
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("reverse", [False, True], ids=["fwd", "rev"])
@pytest.mark.parametrize("chunk", [0, 3], ids=["sequential", "chunked"])
def test_scan_nonfinite(chunk, reverse):
    g = torch.Generator().manual_seed(1)
    a_pokes: list[Poke] = [((0, 1, 0), NAN), ((2, 2, 3), 1e4)]
    if chunk == 0:  # infinite decays: sequential only (module docstring)
        a_pokes += [((1, 4, 1), INF), ((2, 5, 4), -INF)]
    a = _poke(0.5 + 0.5 * torch.rand(B, T, H, generator=g), a_pokes)
    b = _poke(torch.randn(B, T, H, generator=g),
              [((0, 3, 1), INF), ((1, 2, 2), -INF), ((2, 6, 0), -1e4), ((1, 5, 4), NAN)])
    h0 = _poke(torch.randn(B, H, generator=g), [((1, 3), -INF), ((2, 1), NAN)])
    out, last = linear_scan_forward(a, b, h0, None, reverse, chunk=chunk)
    leaves = [x.clone().requires_grad_() for x in (a, b, h0)]
    ref, ref_last = linear_scan_ref(*leaves, reverse=reverse, return_last=True)
    _parity(out, ref.detach(), "out")
    _parity(last, ref_last.detach(), "last")
    go, gl = _weights(out, last)
    da, db, dh0 = linear_scan_backward(go, gl, a, out, h0, None, reverse, chunk=chunk)
    want = torch.autograd.grad((ref, ref_last), leaves, (go, gl))
    for name, x, y in zip(("da", "db", "dh0"), (da, db, dh0), want, strict=True):
        _parity(x, y, name)
    assert torch.isnan(out).any() and torch.isinf(out).any() and torch.isfinite(out).any()


# ------------------------------------------------------------------------------------------------
# QRNN pooling
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pooling", "chunk"), [("f", 3), ("fo", 0), ("ifo", 0), ("ifo", 3)],
    ids=["f-chunked", "fo-sequential", "ifo-sequential", "ifo-chunked"],
)  # fmt: skip
def test_qrnn_nonfinite(pooling, chunk):
    g = torch.Generator().manual_seed(2)
    G = GATES_PER_MODE[pooling]
    pokes: list[Poke] = [
        ((0, 1, 0), NAN), ((2, 0, 2), INF), ((2, 3, 3), -1e4),  # Z
        ((1, 2, H + 1), INF), ((1, 3, H + 2), -INF), ((0, 5, H + 3), 1e4),  # F
        ((2, 6, G * H - 1), -INF),  # O (or F for f-pooling)
    ]  # fmt: skip
    gates = _poke(2 * torch.randn(B, T, G * H, generator=g), pokes)
    c0 = _poke(torch.randn(B, H, generator=g), [((1, 4), INF), ((2, 0), NAN)])
    keep = (torch.rand(B, T, H, generator=g) > 0.3).float()
    mode = POOLING_MODES[pooling]
    h, c, last = qrnn_pooling_forward(gates, c0, keep, 0.8, None, mode, chunk=chunk)
    leaves = [x.clone().requires_grad_() for x in (gates, c0)]
    ref = qrnn_pooling_ref(*leaves, pooling=pooling, keep=keep, keep_scale=0.8)
    for name, x, y in zip(("h", "c", "last"), (h, c, last), ref, strict=True):
        _parity(x, y.detach(), name)
    ws = _weights(h, c, last)
    dgates, dc0 = qrnn_pooling_backward(*ws, gates, c, c0, keep, 0.8, None, mode, chunk=chunk)
    want = torch.autograd.grad(ref, leaves, ws)
    _parity(dgates, want[0], "dgates")
    _parity(dc0, want[1], "dc0")


# ------------------------------------------------------------------------------------------------
# fused cells (torch GEMMs + Triton pointwise kernels)
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_cells_nonfinite(kind):
    g = torch.Generator().manual_seed(3)
    G = 4 if kind == "lstm" else 3
    x = _poke(torch.randn(B, 5, G * H, generator=g),
              [((0, 4, 1), NAN), ((1, 1, H), INF), ((1, 2, 2 * H + 2), -INF),
               ((2, 0, 3), 1e4), ((2, 3, 0), -1e4)])  # fmt: skip
    w = 0.4 * torch.randn(G * H, H, generator=g)
    h0 = _poke(torch.randn(B, H, generator=g), [((2, 3), -INF)])
    third = _poke(torch.randn(B, H, generator=g), [((1, 1), INF)]) if kind == "lstm" else (
        torch.randn(G * H, generator=g))  # fmt: skip
    args = [x, w, h0, third] if kind == "lstm" else [x, w, third, h0]
    fn = cells_triton.lstm_sequence if kind == "lstm" else cells_triton.gru_sequence
    ref_fn = cells_ref.lstm_sequence_ref if kind == "lstm" else cells_ref.gru_sequence_ref
    leaves = [t.clone().requires_grad_() for t in args]
    ref_leaves = [t.clone().requires_grad_() for t in args]
    outs, ref = fn(*leaves), ref_fn(*ref_leaves)
    for k, (o, r) in enumerate(zip(outs, ref, strict=True)):
        _parity(o.detach(), r.detach(), f"output {k}")
    ws = _weights(*outs)
    got = torch.autograd.grad(outs, leaves, ws)
    want = torch.autograd.grad(ref, ref_leaves, ws)
    for k, (x_, y_) in enumerate(zip(got, want, strict=True)):
        _parity(x_, y_, f"gradient {k}")


# ------------------------------------------------------------------------------------------------
# empty shapes: right shapes, final state = initial state, no launch failure
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("batch", "steps"), [(0, 4), (2, 0)], ids=["B0", "T0"])
def test_empty_shapes(batch, steps):
    g = torch.Generator().manual_seed(4)
    a, b = torch.rand(batch, steps, H, generator=g), torch.randn(batch, steps, H, generator=g)
    h0 = torch.randn(batch, H, generator=g)
    out, last = linear_scan_forward(a, b, h0, None, True, chunk=3)
    assert out.shape == (batch, steps, H) and last.shape == (batch, H)
    assert steps > 0 or torch.equal(last, h0)
    da, db, dh0 = linear_scan_backward(None, h0, a, out, h0, None, False, chunk=3)
    assert da.shape == db.shape == (batch, steps, H)
    assert dh0.shape == (batch, H) and (steps > 0 or torch.equal(dh0, h0))

    gates = torch.randn(batch, steps, 3 * H, generator=g)
    h, c, c_last = qrnn_pooling_forward(gates, h0, None, 1.0, None, 1)
    assert h.shape == c.shape == (batch, steps, H)
    assert c_last.shape == (batch, H) and (steps > 0 or torch.equal(c_last, h0))
    dgates, dc0 = qrnn_pooling_backward(h, None, h0, gates, c, h0, None, 1.0, None, 1)
    assert dgates.shape == gates.shape and dc0.shape == (batch, H)

    w = torch.randn(4 * H, H, generator=g).requires_grad_()
    x = torch.randn(batch, steps, 4 * H, generator=g).requires_grad_()
    h_seq, c_seq, h_n, c_n = cells_triton.lstm_sequence(x, w, h0, h0)
    assert h_seq.shape == (batch, steps, H) and h_n.shape == (batch, H)
    assert steps > 0 or (torch.equal(h_n, h0) and torch.equal(c_n, h0))
    (h_seq.sum() + h_n.sum() + c_n.sum()).backward()
    assert x.grad.shape == x.shape and w.grad.shape == w.shape and not w.grad.any()
