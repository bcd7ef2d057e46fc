"""One step of ``torch.nn.LSTM`` through ``torch.lstm_cell`` (the Bahdanau decoder's step)
equals the module's own step: outputs, states and every gradient in float64, for one and
several layers, with and without biases, and with inter-layer dropout while training."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ctrlrnn.models.torch_rnn_step import lstm_step


def _module_step(rnn: nn.LSTM, x: torch.Tensor, state):
    out, new = rnn(x.unsqueeze(1), state)
    return out[:, 0], new


@pytest.mark.parametrize("layers", [1, 2, 3])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("train", [False, True])
def test_equals_the_modules_step(layers, bias, train):
    torch.manual_seed(0)
    rnn = nn.LSTM(5, 4, num_layers=layers, bias=bias, batch_first=True,
                  dropout=0.3 if layers > 1 else 0.0).double().train(train)
    x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(layers, 3, 4, dtype=torch.float64, requires_grad=True)
    c0 = torch.randn(layers, 3, 4, dtype=torch.float64, requires_grad=True)
    results = []
    for step in (lstm_step, _module_step):
        torch.manual_seed(1)  # the same dropout draws
        top, (h, c) = step(rnn, x, (h0, c0))
        loss = (top * torch.arange(4.0, dtype=torch.float64)).sum() + h.square().sum() + c.sum()
        results.append([top, h, c, *torch.autograd.grad(loss, [x, h0, c0, *rnn.parameters()])])
    for got, want in zip(*results, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def test_dropout_acts_between_layers_only_while_training():
    torch.manual_seed(0)
    rnn = nn.LSTM(5, 4, num_layers=2, batch_first=True, dropout=0.5)
    x, state = torch.randn(64, 5), (torch.zeros(2, 64, 4), torch.zeros(2, 64, 4))
    rnn.eval()
    torch.manual_seed(1)
    first = lstm_step(rnn, x, state)[0]
    assert torch.equal(first, lstm_step(rnn, x, state)[0])
    rnn.train()
    assert not torch.equal(first, lstm_step(rnn, x, state)[0])


def test_gradcheck():
    torch.manual_seed(2)
    rnn = nn.LSTM(3, 2, num_layers=2, batch_first=True).double()
    x = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(2, 2, 2, dtype=torch.float64, requires_grad=True)
    c0 = torch.randn(2, 2, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, h, c: lstm_step(rnn, x, (h, c))[1], (x, h0, c0))


@pytest.mark.parametrize("kwargs", [{"bidirectional": True}, {"proj_size": 2}])
def test_refuses_what_it_does_not_run(kwargs):
    with pytest.raises(ValueError, match="rnn: lstm_step runs one-way LSTMs without proj_size"):
        lstm_step(nn.LSTM(3, 4, **kwargs), torch.randn(2, 3),
                  (torch.zeros(2, 2, 4), torch.zeros(2, 2, 4)))


def test_under_autocast_the_step_is_the_modules_own(monkeypatch):
    """The module's step runs in the autocast dtype (``torch.lstm_cell`` would run in float32
    on the CPU), so under autocast the module runs it."""
    torch.manual_seed(3)
    rnn = nn.LSTM(5, 4, num_layers=2, batch_first=True)
    x, state = torch.randn(3, 5), (torch.zeros(2, 3, 4), torch.zeros(2, 3, 4))
    cells = []
    real = torch.lstm_cell
    monkeypatch.setattr(torch, "lstm_cell", lambda *a: cells.append(1) or real(*a))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        top, (h, c) = lstm_step(rnn, x.bfloat16(), state)
        want, (want_h, want_c) = _module_step(rnn, x.bfloat16(), state)
    assert not cells
    for got, ref in ((top, want), (h, want_h), (c, want_c)):
        assert got.dtype == ref.dtype
        torch.testing.assert_close(got, ref, rtol=0, atol=0)
    lstm_step(rnn, x, state)
    assert len(cells) == 2  # outside autocast: a cell a layer
