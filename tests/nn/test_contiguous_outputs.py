"""Outputs and states are laid out as torch.nn.LSTM returns them: contiguous in both layouts, so
the common ``output.view(-1, H)`` (a decoder over all steps) works for every layer."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence

import ctrlrnn

T, B, D, H, C = 6, 3, 4, 5, 2
LENGTHS = torch.tensor([6, 2, 4])

LAYERS: dict[str, Callable[..., nn.Module]] = {
    "qrnn": lambda **kw: ctrlrnn.QRNN(D, H, num_layers=2, window=2, **kw),
    "rcrn": lambda **kw: ctrlrnn.RCRN(D, H, **kw),
    "rcrn-concat": lambda **kw: ctrlrnn.RCRN(D, H, listener="concat_forward", **kw),
    "caslstm": lambda **kw: ctrlrnn.CASLSTM(D, H, num_layers=2, **kw),
    "carnn-n": lambda **kw: ctrlrnn.CARNN(D, H, context_size=C, num_layers=2, **kw),
    "carnn-i": lambda **kw: ctrlrnn.CARNN(D, H, context_size=C, variant="i", **kw),
    "metagross": lambda **kw: ctrlrnn.Metagross(D, H, num_layers=2, **kw),
    "metagross-state": lambda **kw: ctrlrnn.Metagross(D, H, gates="state", **kw),
    "metagross-lstm": lambda **kw: ctrlrnn.Metagross(D, H, base="lstm", **kw),
}


def run(name: str, layer: nn.Module, x: Tensor | PackedSequence, **kw):
    if name.startswith("carnn"):
        return layer(x, torch.randn(B, C), **kw)
    return layer(x, **kw)


def states(h_n: Tensor | tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    return h_n if isinstance(h_n, tuple) else (h_n,)


def check_views(output: Tensor, h_n: Tensor | tuple[Tensor, ...]) -> None:
    assert output.is_contiguous()
    flat = output.view(-1, output.shape[-1])  # raises on a non-contiguous output
    assert torch.equal(flat, output.reshape(-1, output.shape[-1]))
    for s in states(h_n):
        assert s.is_contiguous()
        s.view(-1, s.shape[-1])


@pytest.mark.parametrize("name", sorted(LAYERS))
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("padded", [False, True])
def test_output_and_states_view(name, batch_first, bidirectional, padded):
    layer = LAYERS[name](batch_first=batch_first, bidirectional=bidirectional)
    x = torch.randn(B, T, D) if batch_first else torch.randn(T, B, D)
    output, h_n = run(name, layer, x, lengths=LENGTHS if padded else None)
    assert output.shape == ((B, T) if batch_first else (T, B)) + (layer.output_size,)
    check_views(output, h_n)


@pytest.mark.parametrize("name", sorted(LAYERS))
@pytest.mark.parametrize("bidirectional", [False, True])
def test_packed_output_and_states_view(name, bidirectional):
    layer = LAYERS[name](bidirectional=bidirectional)
    packed = pack_padded_sequence(torch.randn(T, B, D), LENGTHS, enforce_sorted=False)
    output, h_n = run(name, layer, packed)
    assert isinstance(output, PackedSequence)
    check_views(output.data, h_n)


@pytest.mark.parametrize("name", ["qrnn", "caslstm", "metagross-state"])
def test_time_major_output_equals_the_batch_first_one(name):
    """The dense time-major output holds the same numbers as the batch-first run."""
    torch.manual_seed(0)
    tm = LAYERS[name](bidirectional=True)
    bf = LAYERS[name](bidirectional=True, batch_first=True)
    bf.load_state_dict(tm.state_dict())
    x = torch.randn(T, B, D)
    out_tm, _ = run(name, tm, x)
    out_bf, _ = run(name, bf, x.transpose(0, 1))
    assert torch.equal(out_tm, out_bf.transpose(0, 1))


def test_metagross_time_major_gates_view():
    layer = ctrlrnn.Metagross(D, H, depth=3)
    _out, _h, (alpha, beta) = layer(torch.randn(T, B, D), return_gates=True)
    for g in (alpha, beta):
        assert g.shape == (1, T, B, 3)
        g.view(-1, g.shape[-1])
