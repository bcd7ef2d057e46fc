"""``torch.nn.LSTM`` / ``nn.GRU`` over variable-length batches on the fused cells equal torch's
own packed run: outputs (zero past each length), final states and every gradient, in float64,
for one and several layers, one and two directions, with and without initial states and
biases; the paths that must stay packed do."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ctrlrnn.models import torch_rnn_lengths
from ctrlrnn.models.encoders import SequenceEncoder
from ctrlrnn.models.torch_rnn_lengths import fused_path, run_with_lengths
from ctrlrnn.ops import backend

pytestmark = pytest.mark.skipif(not backend.has_kernel("cells", torch.device("cpu")),
                                reason="the fused path needs the compiled cells")

LENGTHS = torch.tensor([5, 7, 1, 3])


def _packed(rnn: nn.Module, x: torch.Tensor, lengths: torch.Tensor, hx=None):
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    out, h_n = rnn(packed, hx)
    return pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])[0], h_n


def _flat(h_n) -> list[torch.Tensor]:
    return list(h_n) if isinstance(h_n, tuple) else [h_n]


@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU])
@pytest.mark.parametrize("layers,bidirectional", [(1, False), (1, True), (3, True), (2, False)])
@pytest.mark.parametrize("with_hx", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_equals_the_packed_run(kind, layers, bidirectional, with_hx, bias):
    torch.manual_seed(0)
    rnn = kind(3, 4, num_layers=layers, bidirectional=bidirectional, batch_first=True,
               bias=bias).double()
    x = torch.randn(4, 7, 3, dtype=torch.float64)
    x[2, 1:] = float("nan")  # padding is never read
    x.requires_grad_(True)
    D = 2 if bidirectional else 1
    hx = None
    if with_hx:
        h0 = torch.randn(layers * D, 4, 4, dtype=torch.float64)
        hx = (h0, torch.randn_like(h0)) if kind is nn.LSTM else h0
    assert fused_path(rnn, x)
    got, got_h = run_with_lengths(rnn, x, LENGTHS, hx)
    want, want_h = _packed(rnn, x, LENGTHS, hx)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    for g, w in zip(_flat(got_h), _flat(want_h), strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=1e-12)
    weights = torch.randn_like(want)
    grads = []
    for out, h_n in ((got, got_h), (want, want_h)):
        loss = (out * weights).nansum() + sum(h.sum() for h in _flat(h_n))
        grads.append(torch.autograd.grad(loss, [x, *rnn.parameters()]))
    for g, w in zip(*grads, strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=1e-11)


def test_gradcheck_through_the_fused_cells():
    torch.manual_seed(1)
    rnn = nn.LSTM(2, 3, bidirectional=True, batch_first=True).double()
    x = torch.randn(3, 4, 2, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([4, 2, 3])
    assert torch.autograd.gradcheck(lambda v: run_with_lengths(rnn, v, lengths)[0], (x,))


def test_dropout_between_layers_drops_only_in_training():
    torch.manual_seed(2)
    rnn = nn.LSTM(3, 4, num_layers=2, batch_first=True, dropout=0.5)
    x = torch.randn(4, 7, 3)
    rnn.eval()
    torch.testing.assert_close(run_with_lengths(rnn, x, LENGTHS)[0], _packed(rnn, x, LENGTHS)[0])
    rnn.train()
    torch.manual_seed(3)
    first = run_with_lengths(rnn, x, LENGTHS)[0]
    torch.manual_seed(4)
    second = run_with_lengths(rnn, x, LENGTHS)[0]
    assert not torch.equal(first, second)
    assert torch.all(first[2, 1:] == 0)


def test_what_stays_packed(monkeypatch):
    x = torch.randn(4, 7, 3)
    assert not fused_path(nn.LSTM(3, 4, proj_size=2, batch_first=True), x)
    assert not fused_path(nn.RNN(3, 4, batch_first=True), x)
    assert not fused_path(nn.LSTM(3, 4, batch_first=True), x.to("meta"))
    monkeypatch.setattr(backend, "has_kernel", lambda family, device: False)
    rnn = nn.GRU(3, 4, batch_first=True)
    assert not fused_path(rnn, x)
    called = []
    monkeypatch.setattr(torch_rnn_lengths, "_fused", lambda *a: called.append(a))
    out, _ = run_with_lengths(rnn, x, LENGTHS)
    assert not called and out.shape == (4, 7, 4)


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("rnn", [nn.LSTM(3, 4, num_layers=2, bidirectional=True, batch_first=True),
                                 nn.GRU(3, 4, batch_first=True),
                                 nn.LSTM(3, 4, proj_size=2, batch_first=True)],
                         ids=["lstm", "gru", "lstm-proj"])
def test_an_empty_batch_gives_empty_outputs_on_either_path(monkeypatch, rnn, packed):
    """Torch refuses to pack an empty batch; both paths give what ``rnn`` gives unpacked."""
    if packed:
        monkeypatch.setattr(backend, "has_kernel", lambda family, device: False)
    x = torch.randn(0, 7, 3)
    out, h_n = run_with_lengths(rnn, x, torch.zeros(0, dtype=torch.long))
    want, want_h = rnn(x)
    assert out.shape == want.shape
    assert [h.shape for h in _flat(h_n)] == [h.shape for h in _flat(want_h)]


@pytest.mark.parametrize("name", ["lstm", "gru"])
def test_the_encoders_final_states_are_those_of_the_packed_run(name):
    torch.manual_seed(5)
    enc = SequenceEncoder(name, 3, {"hidden_size": 4, "num_layers": 2,
                                    "bidirectional": True}).double()
    x = torch.randn(4, 7, 3, dtype=torch.float64)
    out, final, layers = enc.forward_layers(x, LENGTHS)
    want, want_h = _packed(enc.rnn, x, LENGTHS)
    torch.testing.assert_close(out, want, rtol=0, atol=1e-12)
    h = want_h[0] if name == "lstm" else want_h
    top = torch.cat([h[-2], h[-1]], dim=-1)
    torch.testing.assert_close(final, top, rtol=0, atol=1e-12)
    torch.testing.assert_close(layers[:, -1], top, rtol=0, atol=1e-12)
