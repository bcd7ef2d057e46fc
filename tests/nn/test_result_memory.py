"""A layer's results own their memory: ``output`` and each tensor of ``h_n`` share storage with
no other result and with no input, on the short-call step path (views where they are safe) and
the whole-sequence path alike, so an in-place change to one never shows in another."""

from __future__ import annotations

import pytest
import torch

from ctrlrnn import (
    CARNN,
    CASLSTM,
    QRNN,
    RCRN,
    CASLSTMCell,
    Metagross,
    MetagrossCell,
    QRNNCell,
    RCRNCell,
)

D64 = torch.float64

#: (factory(bidirectional, num_layers), context size or None)
UNITS = {
    "qrnn f": (lambda D2, L: QRNN(4, 4, pooling="f", num_layers=L, bidirectional=D2), None),
    "qrnn fo": (lambda D2, L: QRNN(4, 4, num_layers=L, bidirectional=D2), None),
    "ncarnn": (lambda D2, L: CARNN(4, 4, 3, "n", num_layers=L, bidirectional=D2), 3),
    "scarnn": (lambda D2, L: CARNN(4, 4, 3, "s", num_layers=L, bidirectional=D2), 3),
    "metagross": (lambda D2, L: Metagross(4, 4, num_layers=L, bidirectional=D2,
                                          residual=False), None),
    "metagross as printed": (lambda D2, L: Metagross(4, 4, depth=2, gates="state",
                                                     num_layers=L, bidirectional=D2), None),
    "rcrn": (lambda D2, L: RCRN(4, 4, num_layers=L, bidirectional=D2), None),
    "caslstm": (lambda D2, L: CASLSTM(4, 4, num_layers=L, bidirectional=D2), None),
}  # fmt: skip


def _storages(tensors: list[torch.Tensor]) -> list[int]:
    return [t.untyped_storage().data_ptr() for t in tensors]


@pytest.mark.parametrize("unit", sorted(UNITS))
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("T", [1, 3])
@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("with_state", [False, True])
def test_output_and_states_share_no_memory(unit, bidirectional, num_layers, T, grad,
                                           with_state) -> None:  # fmt: skip
    if unit == "scarnn" and bidirectional and num_layers > 1:
        pytest.skip("sCARNN (eq 6) cannot stack bidirectional layers")
    torch.manual_seed(0)
    make, ctx = UNITS[unit]
    layer = make(bidirectional, num_layers).to(D64)
    x = torch.randn(T, 1, 4, dtype=D64)
    args = (x,) if ctx is None else (x, torch.randn(1, ctx, dtype=D64))
    hx = None
    if with_state:
        with torch.no_grad():
            hx = layer(*args)[1]
    with torch.set_grad_enabled(grad):
        out, h_n = layer(*args, hx=hx)
    states = [h_n] if isinstance(h_n, torch.Tensor) else list(h_n)
    given = [] if hx is None else ([hx] if isinstance(hx, torch.Tensor) else list(hx))
    results = _storages([out, *states])
    assert len(set(results)) == len(results), "two results share memory"
    assert not set(results) & set(_storages([x, *given])), "a result shares an input's memory"


CELLS = {
    "qrnn": lambda: QRNNCell(4, 4, window=2),
    "metagross": lambda: MetagrossCell(4, 4, depth=2),
    "metagross as printed": lambda: MetagrossCell(4, 4, depth=2, gates="state"),
    "rcrn": lambda: RCRNCell(4, 4),
    "caslstm": lambda: CASLSTMCell(4, 4, vertical=False),
}


def _flat(value: object) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    return [t for v in value for t in _flat(v)]  # type: ignore[attr-defined]


@pytest.mark.parametrize("cell", sorted(CELLS))
@pytest.mark.parametrize("grad", [False, True])
def test_a_cell_step_output_and_state_share_no_memory(cell, grad) -> None:
    torch.manual_seed(1)
    module = CELLS[cell]().to(D64)
    x = torch.randn(2, 4, dtype=D64)
    step = (lambda s: module(x, None, s)) if cell == "caslstm" else (lambda s: module(x, s))
    with torch.no_grad():
        state = step(None)[1]
    with torch.set_grad_enabled(grad):
        h, new = step(state)
    # (CASLSTMCell returns (h, (h, c)): its output is its state's h, the one tensor twice)
    states = [t for t in _flat(new) if not (cell == "caslstm" and t is h)]
    results = _storages([h, *states])
    assert len(set(results)) == len(results), "two results share memory"
    assert not set(results) & set(_storages([x, *_flat(state)]))
