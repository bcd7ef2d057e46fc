"""Empty and degenerate shapes through the compiled kernels of every op.

Every op must give the reference path's result for a batch of size 0, zero time steps, lengths
that are all zero and channel/hidden size 1: outputs of the right shape and dtype, final states
equal to the initial ones (zeros when none), gradients of the right shape; and never a signal
(a batch of size 0 used to stop the process with SIGFPE, an integer division by zero in the
kernels' work splitting). The layers' side of the contract (a batch of size 0 as
:class:`torch.nn.LSTM` gives it) is ``tests/nn/test_empty_batch.py``.

A crash must fail a test, not kill pytest: the cases run in a few subprocesses, one per group
(:mod:`isolated_cases`).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from backend_parity import both_paths
from isolated_cases import IsolatedCases
from torch import Tensor

CASES = IsolatedCases(__file__)


def _r(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _u(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


#: (B, T, H, lengths) of the op cases: an empty batch, no steps, all-zero lengths, size 1
SHAPES: dict[str, tuple[int, int, int, list[int] | None]] = {
    "B0": (0, 3, 2, None),
    "B0-lengths": (0, 3, 2, []),
    "T0": (2, 0, 2, None),
    "T0-lengths": (2, 0, 2, [0, 0]),
    "zero-lengths": (2, 3, 2, [0, 0]),
    "H1": (2, 3, 1, [3, 1]),
    "B1-H1": (1, 1, 1, None),
}


def _shape(name: str) -> tuple[int, int, int, Tensor | None]:
    b, t, h, lengths = SHAPES[name]
    return b, t, h, None if lengths is None else torch.tensor(lengths, dtype=torch.long)


def _assert_state_kept(outs_last: Tensor, init: Tensor | None, steps: int, lengths: Any) -> None:
    """With no step to run, the final state is the initial one (zeros when none)."""
    if steps == 0 or (lengths is not None and not bool((lengths > 0).any())):
        want = torch.zeros_like(outs_last) if init is None else init
        assert torch.equal(outs_last, want), "final state != initial state"


# ------------------------------------------------------------------------------------------------
# ops
# ------------------------------------------------------------------------------------------------


@CASES.case("scan", *SHAPES)
def case_linear_scan(shape: str) -> None:
    from ctrlrnn.ops.linear_scan import linear_scan

    B, T, C, lengths = _shape(shape)
    a, b, h0 = _u(B, T, C, seed=1), _r(B, T, C, seed=2), _r(B, C, seed=3)
    for reverse in (False, True):
        for init in (None, h0):
            outs = both_paths(
                lambda a, b, h0, reverse=reverse: linear_scan(
                    a, b, h0, reverse=reverse, lengths=lengths, return_last=True
                ),
                [a, b, init],
            )
            assert outs[0].shape == (B, T, C) and outs[1].shape == (B, C)
            _assert_state_kept(outs[1], init, T, lengths)


@CASES.case("scan", *SHAPES)
def case_qrnn_pooling(shape: str) -> None:
    from ctrlrnn.ops.qrnn_pooling import GATES_PER_MODE, qrnn_pooling

    B, T, H, lengths = _shape(shape)
    for pooling, G in GATES_PER_MODE.items():
        gates, c0 = _r(B, T, G * H, seed=4), _r(B, H, seed=5)
        keep = (_u(B, T, H, seed=6) > 0.3).float()
        for init, kw in ((None, {}), (c0, dict(keep=keep, keep_scale=0.75))):
            outs = both_paths(
                lambda g, c0, kw=kw, pooling=pooling: qrnn_pooling(
                    g, c0, pooling=pooling, lengths=lengths, **kw
                ),
                [gates, init],
            )
            assert [o.shape for o in outs] == [(B, T, H), (B, T, H), (B, H)]
            _assert_state_kept(outs[2], init, T, lengths)


@CASES.case("scan", *SHAPES)
def case_rcrn_listener(shape: str) -> None:
    from ctrlrnn.ops.rcrn_listener import rcrn_listener

    B, T, C, lengths = _shape(shape)
    hs, c0 = [_r(B, T, C, seed=s) for s in (7, 8, 9)], _r(B, C, seed=10)
    for split in (C, C // 2, 0):
        for init in (None, c0):
            outs = both_paths(
                lambda h1, h2, h3, c0, split=split: rcrn_listener(
                    h1, h2, h3, c0, lengths=lengths, split=split
                ),
                [*hs, init],
            )
            assert outs[0].shape == (B, T, C) and outs[1].shape == (B, C)
            _assert_state_kept(outs[1], init, T, lengths)


@CASES.case("scan", "B0", "T0", "D0", "N0", "size1")
def case_cached_linear(shape: str) -> None:
    from ctrlrnn.ops.cached_linear import _cached_linear_grouped_op, _cached_linear_op

    lead, D, N = {
        "B0": ((0, 3), 4, 3), "T0": ((2, 0), 4, 3), "D0": ((2, 3), 0, 3),
        "N0": ((2, 3), 4, 0), "size1": ((1, 1), 1, 1),
    }[shape]  # fmt: skip
    # the ops themselves: cached_linear takes F.linear for products this small
    outs = both_paths(_cached_linear_op, [_r(*lead, D), _r(N, D, seed=1), _r(N, seed=2)])
    assert outs[0].shape == (*lead, N)
    outs = both_paths(lambda x, w, b: _cached_linear_grouped_op(x, w, b, 3),
                      [_r(*lead, D), _r(3 * N, D, seed=1), _r(3 * N, seed=2)])
    assert outs[0].shape == (3, *lead, N)


@CASES.case("cells", *SHAPES)
def case_lstm_gru(shape: str) -> None:
    from ctrlrnn.ops.fused_cells import gru_sequence, lstm_sequence

    B, T, H, lengths = _shape(shape)
    h0, c0 = _r(B, H, seed=1), _r(B, H, seed=2)
    outs = both_paths(
        lambda *a: lstm_sequence(*a, lengths=lengths),
        [_r(B, T, 4 * H), 0.5 * _r(4 * H, H, seed=3), h0, c0],
    )
    assert [o.shape for o in outs] == [(B, T, H), (B, T, H), (B, H), (B, H)]
    _assert_state_kept(outs[2], h0, T, lengths)
    _assert_state_kept(outs[3], c0, T, lengths)
    outs = both_paths(
        lambda *a: gru_sequence(*a, lengths=lengths),
        [_r(B, T, 3 * H), 0.5 * _r(3 * H, H, seed=3), _r(3 * H, seed=4), h0],
    )
    assert [o.shape for o in outs] == [(B, T, H), (B, H)]
    _assert_state_kept(outs[1], h0, T, lengths)


@CASES.case("cells", *SHAPES)
def case_cas_lstm_ncarnn(shape: str) -> None:
    from ctrlrnn.ops.fused_cells import cas_lstm_sequence, ncarnn_sequence

    B, T, H, lengths = _shape(shape)
    h0, c0 = _r(B, H, seed=1), _r(B, H, seed=2)
    for peephole in (False, True):
        w = 0.5 * _r((4 if peephole else 5) * H, H, seed=3)
        pp = _r(2, H, seed=4) if peephole else None
        lam = 0.25 + 0.5 * _u(H, seed=5)
        outs = both_paths(
            lambda x, w, low, h0, c0, lam, pp: cas_lstm_sequence(
                x, w, low, h0, c0, lengths, lam, pp
            ),
            [_r(B, T, 5 * H), w, _r(B, T, H, seed=6), h0, c0, lam, pp],
        )
        assert [o.shape for o in outs] == [(B, T, H), (B, T, H), (B, H), (B, H)]
        _assert_state_kept(outs[3], c0, T, lengths)
    outs = both_paths(
        lambda *a: ncarnn_sequence(*a, lengths=lengths),
        [_r(B, T, 3 * H), 0.5 * _r(2 * H, H, seed=3), _r(B, 2 * H, seed=7), h0],
    )
    assert [o.shape for o in outs] == [(B, T, H), (B, H)]
    _assert_state_kept(outs[1], h0, T, lengths)


@CASES.case("metagross", *SHAPES)
def case_metagross_level(shape: str) -> None:
    from ctrlrnn.ops.metagross_level import metagross_level

    B, T, H, lengths = _shape(shape)
    for k in (1, 2):
        s0 = _r(B, k * H, seed=1)
        P, res = _r(B, T, 3, k, H, seed=2), _r(B, T, 1, H, seed=3)
        child = _r(B, T, k, 2, H, seed=4)
        alpha, beta = _u(B, T, k, 1, seed=5), _u(B, T, k, 1, seed=6)
        for h_form in (True, False):
            for kids in ((None, None, None), (child, alpha, beta)):
                for init, r in ((None, None), (s0, res)):
                    outs = both_paths(
                        lambda P, c, a, b, r, s, h_form=h_form: metagross_level(
                            P, c, a, b, r, s, lengths, h_form
                        ),
                        [P, *kids, r, init],
                    )
                    assert [o.shape for o in outs] == [(B, T, k * H), (B, k * H)]
                    _assert_state_kept(outs[1], init, T, lengths)


@pytest.mark.parametrize("name", CASES.names())
def test_case(name: str) -> None:
    CASES.check(name)
