"""NaN and +-Inf parity of the compiled CPU kernels of every op with the reference path.

Every op of :mod:`ctrlrnn.ops` runs forward and backward twice on the same inputs: on the
compiled path (the C++ extensions) and with ``CTRLRNN_BACKEND=reference`` (the readable
references, differentiated by autograd). The inputs hold NaN, +Inf, -Inf and large finite values
(+-1e4) at a few positions; for every output and every gradient the NaN mask, the +Inf mask and
the -Inf mask must be equal and the finite values close (:mod:`backend_parity`, which also says
why the cases with lengths keep their short rows finite). The layers' side of the contract is
``tests/nn/test_nonfinite_input.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import torch
from backend_parity import DTYPES, INF, NAN, Poke, rows_padded
from backend_parity import compare_nonfinite as _compare
from backend_parity import poke as _poke
from torch import Tensor

from ctrlrnn.ops.cached_linear import cached_linear, cached_linear_grouped
from ctrlrnn.ops.fused_cells import (
    cas_lstm_sequence,
    gru_sequence,
    lstm_sequence,
    ncarnn_sequence,
)
from ctrlrnn.ops.linear_scan import linear_scan
from ctrlrnn.ops.metagross_level import metagross_level
from ctrlrnn.ops.qrnn_pooling import GATES_PER_MODE, qrnn_pooling

B, T, H = 3, 5, 4


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
        a, b, h0 = rows_padded(a, 1), rows_padded(b, 1), rows_padded(h0, 1)
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
        gates, c0 = rows_padded(gates, 1), rows_padded(c0, 1)
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
    padded = [rows_padded(t, 1) if t is not None and t.dim() != 1 else t for t in tensors]
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
        P, res, s0 = rows_padded(P, 1), rows_padded(res, 1), rows_padded(s0, 1)
        child, alpha, beta = rows_padded(child, 1), rows_padded(alpha, 1), rows_padded(beta, 1)
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
    w3 = _poke(torch.randn(15, 6, generator=g, dtype=dtype), [((11, 2), -1e4)])
    b3 = _poke(torch.randn(15, generator=g, dtype=dtype), [((8,), INF)])
    _compare(monkeypatch, lambda x, w, b: cached_linear_grouped(x, w, b, 3), [x, w3, b3])
