"""For every layer configuration of :mod:`contract`, outputs and states are laid out as
torch.nn.LSTM returns them: contiguous in both layouts, so the common ``output.view(-1, H)`` (a
decoder over all steps) works for every layer."""

from __future__ import annotations

import pytest
import torch
from contract import NAMES, context, make, run, states
from torch import Tensor
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence

import ctrlrnn

# the layers are tiny: one thread runs torch's ops inline instead of waking a second one
pytestmark = pytest.mark.usefixtures("one_thread")

T, B, D, H = 6, 3, 4, 5
LENGTHS = torch.tensor([6, 2, 4])
#: sCARNN stacks only in one direction (a bidirectional output is wider than its input)
BIDIRECTIONAL = [(n, bi) for n in NAMES for bi in (False, True) if (n, bi) != ("scarnn", True)]


def check_views(output: Tensor, h_n: Tensor | tuple[Tensor, ...]) -> None:
    assert output.is_contiguous()
    flat = output.view(-1, output.shape[-1])  # raises on a non-contiguous output
    assert torch.equal(flat, output.reshape(-1, output.shape[-1]))
    for s in states(h_n):
        assert s.is_contiguous()
        s.view(-1, s.shape[-1])


@pytest.mark.parametrize(("name", "bidirectional"), BIDIRECTIONAL)
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("padded", [False, True])
def test_output_and_states_view(name, batch_first, bidirectional, padded):
    layer = make(name, D, H, batch_first=batch_first, bidirectional=bidirectional)
    x = torch.randn(B, T, D) if batch_first else torch.randn(T, B, D)
    output, h_n = run(layer, x, context(layer, B), lengths=LENGTHS if padded else None)
    assert output.shape == ((B, T) if batch_first else (T, B)) + (layer.output_size,)
    check_views(output, h_n)


@pytest.mark.parametrize(("name", "bidirectional"), BIDIRECTIONAL)
def test_packed_output_and_states_view(name, bidirectional):
    layer = make(name, D, H, bidirectional=bidirectional)
    packed = pack_padded_sequence(torch.randn(T, B, D), LENGTHS, enforce_sorted=False)
    output, h_n = run(layer, packed, context(layer, B))
    assert isinstance(output, PackedSequence)
    check_views(output.data, h_n)


@pytest.mark.parametrize("name", ["qrnn", "caslstm", "metagross-state"])
def test_time_major_output_equals_the_batch_first_one(name):
    """The dense time-major output holds the same numbers as the batch-first run."""
    torch.manual_seed(0)
    tm = make(name, D, H, bidirectional=True)
    bf = make(name, D, H, bidirectional=True, batch_first=True)
    bf.load_state_dict(tm.state_dict())
    x = torch.randn(T, B, D)
    out_tm, _ = run(tm, x)
    out_bf, _ = run(bf, x.transpose(0, 1))
    assert torch.equal(out_tm, out_bf.transpose(0, 1))


def test_metagross_time_major_gates_view():
    layer = ctrlrnn.Metagross(D, H, depth=3)
    _out, _h, (alpha, beta) = layer(torch.randn(T, B, D), return_gates=True)
    for g in (alpha, beta):
        assert g.shape == (1, T, B, 3)
        g.view(-1, g.shape[-1])
