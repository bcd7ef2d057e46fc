"""NaN and +-Inf parity of the compiled CPU kernels with the reference path (issue 14).

Every op of :mod:`ctrlrnn.ops` and every layer runs forward and backward twice on the same
inputs: on the compiled path (the C++ extensions) and with ``CTRLRNN_BACKEND=reference`` (the
readable references, differentiated by autograd). The inputs hold NaN, +Inf, -Inf and large
finite values (+-1e4) at a few positions; for every output and every gradient the NaN mask,
the +Inf mask and the -Inf mask must be equal and the finite values close.

The special values sit in sequences of full length. Past a sequence's length the compiled
kernels write exactly zero gradients (the documented contract: nothing depends on the
padding), whereas the references differentiate ``torch.where(valid, new, old)`` with autograd,
which leaves ``0 * NaN = NaN`` (and ``0 * Inf``) in the gradients of padded steps whenever the
carried state is not finite there; the length cases therefore keep their short rows finite.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
from torch import Tensor

import ctrlrnn
from ctrlrnn.ops.cached_linear import cached_linear
from ctrlrnn.ops.fused_cells import (
    cas_lstm_sequence,
    gru_sequence,
    lstm_sequence,
    ncarnn_sequence,
)
from ctrlrnn.ops.linear_scan import linear_scan
from ctrlrnn.ops.metagross_level import metagross_level
from ctrlrnn.ops.qrnn_pooling import GATES_PER_MODE, qrnn_pooling

NAN, INF = float("nan"), float("inf")
B, T, H = 3, 5, 4
DTYPES = [pytest.param(torch.float32, id="f32"), pytest.param(torch.float64, id="f64")]
Poke = tuple[tuple[int, ...], float]


def _tols(dtype: torch.dtype) -> tuple[float, float]:
    return (1e-4, 1e-5) if dtype == torch.float32 else (1e-9, 1e-11)


def _poke(x: Tensor, pokes: Sequence[Poke]) -> Tensor:
    """A copy of ``x`` with ``x[idx] = value`` for each poke."""
    x = x.clone()
    for idx, value in pokes:
        x[idx] = value
    return x


def _rows_padded(x: Tensor, rows: int) -> Tensor:
    """``x`` with ``rows`` more finite batch rows (the short sequences of the length cases)."""
    g = torch.Generator().manual_seed(99)
    extra = torch.rand((rows, *x.shape[1:]), generator=g, dtype=x.dtype)
    return torch.cat([x, 0.25 + 0.5 * extra], 0)


def _flat(out: Any) -> list[Tensor]:
    if isinstance(out, Tensor):
        return [out]
    flat: list[Tensor] = []
    for o in out:
        flat.extend(_flat(o))
    return flat


def _forward_backward(
    fn: Callable[..., Any], inputs: Sequence[Tensor | None], params: Sequence[Tensor] = ()
) -> tuple[list[Tensor], list[Tensor | None]]:
    """Outputs of ``fn(*inputs)`` and the gradients of ``sum_k <w_k, out_k>`` (fixed random
    ``w_k``) w.r.t. the floating inputs and ``params``."""
    leaves = [
        x.detach().clone().requires_grad_() if x is not None and x.is_floating_point() else x
        for x in inputs
    ]
    outs = [o for o in _flat(fn(*leaves)) if o.requires_grad]
    g = torch.Generator().manual_seed(1234)
    weights = [torch.randn(o.shape, generator=g, dtype=torch.float64).to(o.dtype) for o in outs]
    wrt = [x for x in leaves if isinstance(x, Tensor) and x.requires_grad] + list(params)
    grads = torch.autograd.grad(outs, wrt, weights, allow_unused=True)
    return [o.detach() for o in outs], list(grads)


def _assert_parity(got: Tensor | None, want: Tensor | None, name: str) -> None:
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
        rtol, atol = _tols(want.dtype)
        scale = max(1.0, want[fin].abs().max().item())
        torch.testing.assert_close(
            got[fin], want[fin], rtol=rtol, atol=atol * scale, msg=lambda m: f"{name}: {m}"
        )


def _compare(
    monkeypatch: pytest.MonkeyPatch,
    fn: Callable[..., Any],
    inputs: Sequence[Tensor | None],
    *,
    params: Sequence[Tensor] = (),
    expect_finite: bool = True,
) -> None:
    """Run ``fn`` on both paths and compare every output and every gradient (w.r.t. the
    floating inputs and ``params``)."""
    monkeypatch.delenv("CTRLRNN_BACKEND", raising=False)
    outs, grads = _forward_backward(fn, inputs, params)
    monkeypatch.setenv("CTRLRNN_BACKEND", "reference")
    ref_outs, ref_grads = _forward_backward(fn, inputs, params)
    monkeypatch.delenv("CTRLRNN_BACKEND")
    assert len(outs) == len(ref_outs) and len(grads) == len(ref_grads)
    for k, (x, y) in enumerate(zip(outs, ref_outs, strict=True)):
        _assert_parity(x, y, f"output {k}")
    for k, (x, y) in enumerate(zip(grads, ref_grads, strict=True)):
        _assert_parity(x, y, f"gradient {k}")
    every = torch.cat([t.flatten().double() for t in outs + [g for g in grads if g is not None]])
    # not vacuous: the special values reached the results, and finite values remain to compare
    assert torch.isnan(every).any()
    if expect_finite:
        assert torch.isfinite(every).any()


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------------------------------------
# linear scan
# ------------------------------------------------------------------------------------------------

SCAN_POKES_A: list[Poke] = [((0, 1, 0), NAN), ((1, 0, 3), 1e4), ((2, 1, 1), INF)]
SCAN_POKES_B: list[Poke] = [((0, 3, 1), INF), ((1, 2, 2), -INF), ((2, 4, 0), -1e4)]
SCAN_CASES = [
    dict(reverse=False, lengths=None, h0=False),
    dict(reverse=True, lengths=None, h0=True),
    dict(reverse=False, lengths=[T, T, T, 2], h0=True),
    dict(reverse=True, lengths=[T, T, T, 0], h0=False),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", SCAN_CASES, ids=lambda c: f"rev{c['reverse']}-{c['lengths']}")
def test_linear_scan(monkeypatch, case, dtype):
    g = _gen(0)
    a = _poke(0.5 + 0.5 * torch.rand(B, T, H, generator=g, dtype=dtype), SCAN_POKES_A)
    b = _poke(torch.randn(B, T, H, generator=g, dtype=dtype), SCAN_POKES_B)
    h0 = _poke(torch.randn(B, H, generator=g, dtype=dtype), [((1, 2), -INF)])
    lengths = None
    if case["lengths"] is not None:
        a, b, h0 = _rows_padded(a, 1), _rows_padded(b, 1), _rows_padded(h0, 1)
        lengths = torch.tensor(case["lengths"])
    if not case["h0"]:
        h0 = None

    def fn(a, b, h0):
        return linear_scan(a, b, h0, reverse=case["reverse"], lengths=lengths, return_last=True)

    _compare(monkeypatch, fn, [a, b, h0])


# ------------------------------------------------------------------------------------------------
# QRNN pooling
# ------------------------------------------------------------------------------------------------


def _qrnn_pokes(pooling: str) -> list[Poke]:
    pokes: list[Poke] = [
        ((0, 1, 0), NAN),  # Z
        ((2, 0, 2), INF),  # Z
        ((2, 3, 3), -1e4),  # Z
        ((1, 2, H + 1), INF),  # F: f = 1
        ((1, 3, H + 2), -INF),  # F: f = 0
        ((0, 4, H + 3), 1e4),  # F
    ]
    if pooling != "f":
        pokes += [((0, 2, 2 * H + 3), -INF), ((2, 1, 2 * H + 1), 1e4)]  # O
    if pooling == "ifo":
        pokes += [((2, 2, 3 * H + 2), INF), ((1, 0, 3 * H), -1e4)]  # I
    return pokes


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("extras", [False, True], ids=["plain", "c0-keep-lengths"])
@pytest.mark.parametrize("pooling", ["f", "fo", "ifo"])
def test_qrnn_pooling(monkeypatch, pooling, extras, dtype):
    g = _gen(1)
    G = GATES_PER_MODE[pooling]
    gates = _poke(2 * torch.randn(B, T, G * H, generator=g, dtype=dtype), _qrnn_pokes(pooling))
    kw: dict[str, Any] = dict(pooling=pooling)
    c0 = None
    if extras:
        c0 = _poke(torch.randn(B, H, generator=g, dtype=dtype), [((1, 3), INF), ((2, 0), NAN)])
        gates, c0 = _rows_padded(gates, 1), _rows_padded(c0, 1)
        kw["keep"] = (torch.rand(B + 1, T, H, generator=g) > 0.3).to(dtype)
        kw["keep_scale"] = 0.8
        kw["lengths"] = torch.tensor([T, T, T, 3])

    _compare(monkeypatch, lambda gates, c0: qrnn_pooling(gates, c0, **kw), [gates, c0])


# ------------------------------------------------------------------------------------------------
# fused cells
# ------------------------------------------------------------------------------------------------


def _cell_x(gates: int, dtype: torch.dtype, g: torch.Generator) -> Tensor:
    """``x_proj`` with NaN at the last step of row 0 (so that it does not reach every value)
    and saturating values (+-Inf, +-1e4) in the gate pre-activations of rows 1 and 2."""
    pokes: list[Poke] = [
        ((0, T - 1, 1), NAN),
        ((1, 1, H), INF),
        ((1, 2, 2 * H + 2), -INF),
        ((2, 0, (gates - 1) * H + 3), 1e4),
        ((2, 3, 0), -1e4),
        ((1, 4, H + 1), -INF),
    ]
    return _poke(torch.randn(B, T, gates * H, generator=g, dtype=dtype), pokes)


def _state(dtype: torch.dtype, g: torch.Generator, pokes: Sequence[Poke] = ()) -> Tensor:
    return _poke(torch.randn(B, H, generator=g, dtype=dtype), pokes)


def _maybe_lengths(with_lengths: bool, *tensors: Tensor | None) -> tuple[Any, ...]:
    """Add one finite short row to every tensor; the lengths ``[T, T, T, 2]`` or None."""
    if not with_lengths:
        return (*tensors, None)
    padded = [_rows_padded(t, 1) if t is not None and t.dim() != 1 else t for t in tensors]
    return (*padded, torch.tensor([T, T, T, 2]))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_lengths", [False, True], ids=["full", "lengths"])
def test_lstm_sequence(monkeypatch, with_lengths, dtype):
    g = _gen(2)
    x = _cell_x(4, dtype, g)
    w = 0.5 * torch.randn(4 * H, H, generator=g, dtype=dtype)
    h0 = _state(dtype, g, [((0, 2), -INF)])
    c0 = _state(dtype, g, [((2, 1), INF)])  # an infinite cell with finite h = o tanh(c)
    x, h0, c0, lengths = _maybe_lengths(with_lengths, x, h0, c0)
    _compare(monkeypatch, lambda *a: lstm_sequence(*a, lengths=lengths), [x, w, h0, c0])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_lengths", [False, True], ids=["full", "lengths"])
def test_gru_sequence(monkeypatch, with_lengths, dtype):
    g = _gen(3)
    x = _cell_x(3, dtype, g)
    w = 0.5 * torch.randn(3 * H, H, generator=g, dtype=dtype)
    bias = _poke(torch.randn(3 * H, generator=g, dtype=dtype), [((2 * H + 1,), 1e4)])
    h0 = _state(dtype, g, [((2, 3), INF)])
    x, h0, lengths = _maybe_lengths(with_lengths, x, h0)
    _compare(monkeypatch, lambda *a: gru_sequence(*a, lengths=lengths), [x, w, bias, h0])


CAS_CASES = [
    dict(lambda_="0.5", peephole=False),
    dict(lambda_="tensor", peephole=False),
    dict(lambda_="none", peephole=True),
    dict(lambda_="tensor", peephole=True),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CAS_CASES, ids=lambda c: f"{c['lambda_']}-peep{c['peephole']}")
def test_cas_lstm_sequence(monkeypatch, case, dtype):
    g = _gen(4)
    peep = case["peephole"]
    x = _cell_x(5, dtype, g)
    w = 0.5 * torch.randn((4 if peep else 5) * H, H, generator=g, dtype=dtype)
    lower = _poke(
        torch.randn(B, T, H, generator=g, dtype=dtype), [((1, 2, 0), INF), ((2, 1, 2), -1e4)]
    )
    h0 = _state(dtype, g, [((2, 0), -INF)])
    c0 = _state(dtype, g, [((1, 3), INF)])
    lam = 0.25 + 0.5 * torch.rand(H, generator=g, dtype=dtype)
    pp = 0.5 * torch.randn(2, H, generator=g, dtype=dtype)
    with_lengths = case["lambda_"] == "tensor" and peep
    x, lower, h0, c0, lengths = _maybe_lengths(with_lengths, x, lower, h0, c0)

    def fn(x, w, lower, h0, c0, lam, pp):
        lambda_: Any = {"0.5": 0.5, "none": None, "tensor": lam}[case["lambda_"]]
        return cas_lstm_sequence(x, w, lower, h0, c0, lengths, lambda_, pp if peep else None)

    _compare(monkeypatch, fn, [x, w, lower, h0, c0, lam, pp])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_lengths", [False, True], ids=["full", "lengths"])
def test_ncarnn_sequence(monkeypatch, with_lengths, dtype):
    g = _gen(5)
    x = _cell_x(3, dtype, g)
    w = 0.5 * torch.randn(2 * H, H, generator=g, dtype=dtype)
    ctx = _poke(torch.randn(B, 2 * H, generator=g, dtype=dtype), [((2, 1), -INF)])
    h0 = _state(dtype, g, [((1, 2), INF)])
    x, ctx, h0, lengths = _maybe_lengths(with_lengths, x, ctx, h0)
    _compare(monkeypatch, lambda *a: ncarnn_sequence(*a, lengths=lengths), [x, w, ctx, h0])


# ------------------------------------------------------------------------------------------------
# METAGROSS level
# ------------------------------------------------------------------------------------------------

K = 2


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("children", [False, True], ids=["leaves", "children"])
@pytest.mark.parametrize("h_form", [True, False], ids=["h", "c"])
def test_metagross_level(monkeypatch, h_form, children, dtype):
    g = _gen(6)
    P = _poke(
        torch.randn(B, T, 3, K, H, generator=g, dtype=dtype),
        [
            ((0, 1, 0, 0, 0), NAN),  # F
            ((1, 2, 1, 0, 1), INF),  # O
            ((1, 3, 2, 1, 2), -INF),  # Z
            ((2, 0, 0, 1, 3), 1e4),  # F
            ((2, 4, 1, 1, 0), -1e4),  # O
            ((2, 2, 0, 0, 2), -INF),  # F: f = 0
        ],
    )
    child = alpha = beta = None
    if children:
        child = _poke(
            torch.randn(B, T, K, 2, H, generator=g, dtype=dtype),
            [((2, 2, 0, 1, 0), -INF), ((1, 1, 1, 0, 3), 1e4)],
        )
        alpha = torch.rand(B, T, K, 1, generator=g, dtype=dtype)
        beta = _poke(torch.rand(B, T, K, 1, generator=g, dtype=dtype), [((0, 3, 1, 0), NAN)])
    res = _poke(torch.randn(B, T, 1, H, generator=g, dtype=dtype), [((2, 1, 0, 2), INF)])
    s0 = _poke(torch.randn(B, K * H, generator=g, dtype=dtype), [((1, 5), -INF)])
    lengths = None
    if children and not h_form:  # one case with lengths: a finite short row
        P, res, s0 = _rows_padded(P, 1), _rows_padded(res, 1), _rows_padded(s0, 1)
        child, alpha, beta = _rows_padded(child, 1), _rows_padded(alpha, 1), _rows_padded(beta, 1)
        lengths = torch.tensor([T, T, T, 2])

    def fn(P, child, alpha, beta, res, s0):
        return metagross_level(P, child, alpha, beta, res, s0, lengths, h_form)

    _compare(monkeypatch, fn, [P, child, alpha, beta, res, s0])


# ------------------------------------------------------------------------------------------------
# cached linear
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_cached_linear(monkeypatch, dtype):
    g = _gen(7)
    x = _poke(
        torch.randn(B, T, 6, generator=g, dtype=dtype),
        [((0, 1, 0), NAN), ((1, 2, 3), INF), ((2, 0, 5), -INF), ((2, 4, 1), 1e4)],
    )
    w = _poke(torch.randn(5, 6, generator=g, dtype=dtype), [((4, 2), -1e4)])
    bias = _poke(torch.randn(5, generator=g, dtype=dtype), [((3,), INF)])
    _compare(monkeypatch, cached_linear, [x, w, bias])


# ------------------------------------------------------------------------------------------------
# layers
# ------------------------------------------------------------------------------------------------

D = 4  # input size (= hidden size, as sCARNN needs)
LAYER_POKES: list[Poke] = [
    ((0, 1, 0), NAN),
    ((1, 2, 1), INF),
    ((1, 3, 2), -INF),
    ((2, 0, 3), 1e4),
    ((2, 4, 0), -1e4),
]


def _layers() -> dict[str, Callable[[], torch.nn.Module]]:
    kw: dict[str, Any] = dict(batch_first=True)
    return {
        "qrnn": lambda: ctrlrnn.QRNN(D, H, **kw),
        "qrnn-ifo-zoneout": lambda: ctrlrnn.QRNN(D, H, pooling="ifo", zoneout=0.25, **kw).eval(),
        "rcrn": lambda: ctrlrnn.RCRN(D, H, **kw),
        "rcrn-gru": lambda: ctrlrnn.RCRN(D, H, cell="gru", **kw),
        "caslstm": lambda: ctrlrnn.CASLSTM(D, H, num_layers=2, **kw),
        "carnn-n": lambda: ctrlrnn.CARNN(D, H, 3, variant="n", **kw),
        "carnn-i": lambda: ctrlrnn.CARNN(D, H, 3, variant="i", **kw),
        "carnn-s": lambda: ctrlrnn.CARNN(D, H, 3, variant="s", **kw),
        "metagross": lambda: ctrlrnn.Metagross(D, H, depth=2, base="linear", **kw),
        "metagross-lstm": lambda: ctrlrnn.Metagross(D, H, depth=2, base="lstm", **kw),
        "metagross-c": lambda: ctrlrnn.Metagross(D, H, depth=2, recurrence="c", **kw),
        "metagross-state": lambda: ctrlrnn.Metagross(D, H, depth=2, gates="state", **kw),
        "metagross-ffn": lambda: ctrlrnn.MetagrossFFN(D, depth=2),
    }


LAYER_PARAMS = [
    pytest.param(name, dtype, nan_weights, id=f"{name}-{str(dtype)[6:]}{'-nanw' * nan_weights}")
    for name in _layers()
    for dtype, nan_weights in ((torch.float32, False), (torch.float64, False),
                               (torch.float32, True))  # fmt: skip
]


@pytest.mark.parametrize(("name", "dtype", "nan_weights"), LAYER_PARAMS)
def test_layer(monkeypatch, name, dtype, nan_weights):
    torch.manual_seed(8)
    module = _layers()[name]().to(dtype)
    if nan_weights:
        with torch.no_grad():
            for p in module.parameters():
                p.fill_(NAN)
    g = _gen(9)
    x = torch.randn(B, T, D, generator=g, dtype=dtype)
    if not nan_weights:
        x = _poke(x, LAYER_POKES)
    inputs: list[Tensor | None] = [x]
    if name.startswith("carnn"):
        inputs.append(_poke(torch.randn(B, 3, generator=g, dtype=dtype), [((2, 1), 1e4)]))

    def fn(x, context=None):
        if context is not None:
            return module(x, context)
        return module(x)

    params = list(module.parameters())
    _compare(monkeypatch, fn, inputs, params=params, expect_finite=not nan_weights)
