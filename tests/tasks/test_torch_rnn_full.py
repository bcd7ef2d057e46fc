"""``run_full``: ``torch.nn.LSTM`` over sequences of one length, trained on the fused cells where
``fused_training_faster`` says so, equals the module itself (outputs, final states, every
gradient, float64), and the task models' full-length calls go through it."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

from ctrlrnn.models import torch_rnn_lengths
from ctrlrnn.models.torch_rnn_lengths import fused_training_faster, run_full
from ctrlrnn.ops import backend

pytestmark = pytest.mark.skipif(not backend.has_kernel("cells", torch.device("cpu")),
                                reason="the fused path needs the compiled cells")


def _flat(h_n) -> list[torch.Tensor]:
    return list(h_n) if isinstance(h_n, tuple) else [h_n]


@pytest.fixture
def any_work(monkeypatch):
    """Every shape counts as enough work, so small shapes take the fused cells."""
    monkeypatch.setattr(torch_rnn_lengths, "FUSED_TRAINING_WORK", 1)


@pytest.mark.parametrize("layers,bidirectional,steps", [
    (1, False, 6), (1, True, 5), (2, False, 6), (3, True, 5)])
@pytest.mark.parametrize("with_hx", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_equals_the_module(any_work, layers, bidirectional, steps, with_hx, bias):
    torch.manual_seed(0)
    rnn = nn.LSTM(3, 4, num_layers=layers, bidirectional=bidirectional, batch_first=True,
                  bias=bias).double()
    batch = 2
    x = torch.randn(batch, steps, 3, dtype=torch.float64, requires_grad=True)
    D = 2 if bidirectional else 1
    hx = None
    if with_hx:
        h0 = torch.randn(layers * D, batch, 4, dtype=torch.float64)
        hx = (h0, torch.randn_like(h0))
    assert fused_training_faster(rnn, x)
    got, got_h = run_full(rnn, x, hx)
    want, want_h = rnn(x, hx)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    for g, w in zip(_flat(got_h), _flat(want_h), strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=1e-12)
    weights = torch.randn_like(want)
    grads = []
    for out, h_n in ((got, got_h), (want, want_h)):
        loss = (out * weights).sum() + sum((h * h).sum() for h in _flat(h_n))
        grads.append(torch.autograd.grad(loss, [x, *rnn.parameters()]))
    for g, w in zip(*grads, strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=1e-10)


def test_gradcheck_through_run_full(any_work):
    torch.manual_seed(1)
    rnn = nn.LSTM(2, 3, num_layers=2, bidirectional=True, batch_first=True).double()
    x = torch.randn(3, 4, 2, dtype=torch.float64, requires_grad=True)
    assert fused_training_faster(rnn, x)
    assert torch.autograd.gradcheck(lambda v: run_full(rnn, v)[0], (x,))


def _stack(layers: int = 2, hidden: int = 4, **kwargs) -> nn.Module:
    kind = kwargs.pop("kind", nn.LSTM)
    return kind(3, hidden, num_layers=layers, **{"batch_first": True, **kwargs})


def test_the_rule_takes_enough_work():
    one, stack = _stack(1, hidden=128), _stack(2, hidden=128)
    for rnn in (one, stack):  # 64 * 128 * 128 ** 2 = 2 ** 27
        assert fused_training_faster(rnn, torch.randn(64, 128, 3))
        assert fused_training_faster(rnn, torch.randn(16, 512, 3))
        assert not fused_training_faster(rnn, torch.randn(64, 127, 3))
    assert not fused_training_faster(_stack(1, hidden=64), torch.randn(64, 128, 3))
    assert fused_training_faster(_stack(1, hidden=256), torch.randn(16, 128, 3))
    assert fused_training_faster(_stack(1, hidden=128), torch.randn(64, 784, 3))  # pixels


def test_the_rule_takes_training_only(any_work):
    stack, x = _stack(), torch.randn(2, 5, 3)
    assert fused_training_faster(stack, x)  # parameters need gradients
    with torch.no_grad():
        assert not fused_training_faster(stack, x)  # inference: oneDNN's forward is faster
    stack.requires_grad_(False)
    assert not fused_training_faster(stack, x)
    assert fused_training_faster(stack, x.requires_grad_())  # a gradient for the input only


@pytest.mark.parametrize("module", [
    lambda: _stack(kind=nn.GRU),  # not measured: the GRU stays torch's
    lambda: _stack(batch_first=False),
    lambda: _stack(proj_size=2),
])
def test_the_rule_leaves_other_modules_to_torch(module, any_work):
    assert not fused_training_faster(module(), torch.randn(2, 5, 3))


def test_the_rule_leaves_autocast_to_torch(any_work):
    stack, x = _stack(), torch.randn(2, 5, 3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not fused_training_faster(stack, x)
        try:
            want, _ = stack(x)
        except RuntimeError as error:  # oneDNN has no bfloat16 LSTM on some CPUs (AVX2 only)
            with pytest.raises(RuntimeError, match=re.escape(str(error)[:40])):
                run_full(stack, x)  # torch's own layer, so torch's own error
            return
        out, _ = run_full(stack, x)
    assert out.dtype == want.dtype == torch.bfloat16  # torch's own layer under autocast


def test_dropout_between_layers_drops_only_in_training(any_work):
    torch.manual_seed(2)
    rnn = nn.LSTM(3, 4, num_layers=2, batch_first=True, dropout=0.5)
    x = torch.randn(4, 6, 3)
    rnn.eval()
    assert fused_training_faster(rnn, x)
    torch.testing.assert_close(run_full(rnn, x)[0], rnn(x)[0])
    rnn.train()
    torch.manual_seed(3)
    dropped = run_full(rnn, x)[0]
    assert not torch.allclose(dropped, rnn.eval()(x)[0])


def _spy(monkeypatch) -> list[int]:
    calls: list[int] = []
    original = torch_rnn_lengths._fused

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(torch_rnn_lengths, "_fused", counting)
    return calls


def test_the_encoder_and_the_dense_stack_train_through_it(monkeypatch, any_work):
    from ctrlrnn.models.dense_rnn import DenseRNN
    from ctrlrnn.models.encoders import SequenceEncoder

    calls = _spy(monkeypatch)
    enc = SequenceEncoder("lstm", 3, {"hidden_size": 4, "num_layers": 2})
    out, _, _ = enc(torch.randn(2, 5, 3))
    out.sum().backward()
    assert calls == [1]
    dense = DenseRNN("lstm", 3, 4, num_layers=2)
    dense(torch.randn(2, 5, 3))[0].sum().backward()
    assert len(calls) == 3  # and each of the dense stack's one-layer layers


def _decoders() -> list[nn.Module]:
    from ctrlrnn.models.attn_lstm_seq2seq import AttnLSTMSeq2Seq
    from ctrlrnn.models.seq2seq import Seq2Seq

    return [
        Seq2Seq(11, 9, encoder="lstm", encoder_args={"hidden_size": 6, "num_layers": 2},
                decoder="lstm", embedding_size=5),
        AttnLSTMSeq2Seq(11, 9, encoder="lstm", encoder_args={"hidden_size": 6, "num_layers": 2},
                        embedding_size=5, input_feeding=False),
    ]


@pytest.mark.parametrize("index", [0, 1])
def test_the_teacher_forced_decoders_train_through_it(monkeypatch, any_work, index):
    torch.manual_seed(4)
    model = _decoders()[index].double()
    src = torch.randint(4, 11, (3, 6))
    src_lengths = torch.tensor([6, 4, 2])
    tgt = torch.randint(4, 9, (3, 5))
    grads = []
    for fused in (True, False):
        if not fused:
            monkeypatch.setattr(torch_rnn_lengths, "fused_training_faster", lambda rnn, x: False)
        calls = _spy(monkeypatch)
        logits = model(src, src_lengths, tgt)
        assert len(calls) == (2 if fused else 1)  # the encoder (over lengths), the decoder
        grads.append([logits, *torch.autograd.grad(logits.square().sum(),
                                                   list(model.parameters()))])
    for g, w in zip(*grads, strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=1e-10)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_modules_train_through_it(any_work, dtype):
    torch.manual_seed(5)
    rnn = nn.LSTM(3, 8, num_layers=2, bidirectional=True, batch_first=True).to(dtype)
    x = torch.randn(4, 6, 3, dtype=dtype)
    got, (h, c) = run_full(rnn, x)
    want, (hw, cw) = rnn(x)
    assert got.dtype == dtype and h.dtype == dtype
    for g, w in ((got, want), (h, hw), (c, cw)):
        torch.testing.assert_close(g.float(), w.float(), rtol=2e-2, atol=1e-2)
    got.float().sum().backward()
    assert all(p.grad is not None and p.grad.dtype == dtype for p in rnn.parameters())
