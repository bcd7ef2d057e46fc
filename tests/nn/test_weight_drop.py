"""``weight_drop=``: DropConnect on the QRNN's convolution weights and on the recurrent matrices of
the fused-cell layers, as AWD-LSTM applies it (one mask per matrix per forward call, inverted
scaling, the weights themselves in evaluation)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import ctrlrnn

T, B, D, H, C = 5, 3, 4, 6, 2
P = 0.4

# name -> (factory, the parameters DropConnect must reach)
LAYERS: dict[str, tuple[Callable[..., nn.Module], tuple[str, ...]]] = {
    "qrnn": (lambda **kw: ctrlrnn.QRNN(D, H, num_layers=2, bidirectional=True, **kw),
             ("weight",)),
    "rcrn-lstm": (lambda **kw: ctrlrnn.RCRN(D, H, bidirectional=True, **kw), ("weight_hh",)),
    "rcrn-gru": (lambda **kw: ctrlrnn.RCRN(D, H, cell="gru", **kw), ("weight_hh",)),
    "caslstm": (lambda **kw: ctrlrnn.CASLSTM(D, H, num_layers=2, **kw), ("weight_hh",)),
    "caslstm-peephole": (lambda **kw: ctrlrnn.CASLSTM(D, H, num_layers=2, peephole=True, **kw),
                         ("weight_hh",)),
    "carnn": (lambda **kw: ctrlrnn.CARNN(D, H, context_size=C, num_layers=2, **kw),
              ("weight_hh",)),
    "metagross-state": (lambda **kw: ctrlrnn.Metagross(D, H, gates="state", **kw),
                        ("weight_hh",)),
    "metagross-lstm": (lambda **kw: ctrlrnn.Metagross(D, H, base="lstm", **kw),
                       ("base_weight_hh",)),
    "metagross-state-gru": (lambda **kw: ctrlrnn.Metagross(D, H, base="gru", gates="state", **kw),
                            ("weight_hh", "base_weight_hh")),
}


def run(layer: nn.Module, x: Tensor, context: Tensor) -> Tensor:
    out, _ = layer(x, context) if isinstance(layer, ctrlrnn.CARNN) else layer(x)
    return out


class Recorder:
    """``torch.nn.functional.dropout`` that records ``(input, output)`` of every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[Tensor, Tensor]] = []
        self.real = F.dropout

    def __call__(self, input: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        out = self.real(input, *args, **kwargs)
        self.calls.append((input, out))
        return out


@pytest.fixture
def recorder(monkeypatch) -> Recorder:
    rec = Recorder()
    monkeypatch.setattr(torch.nn.functional, "dropout", rec)
    return rec


def dropped(layer: nn.Module, rec: Recorder) -> dict[str, Tensor]:
    """The dropped sample of each parameter, by name (every recorded call must be on one)."""
    names = {id(p): n for n, p in layer.named_parameters()}
    out = {}
    for inp, sample in rec.calls:
        assert id(inp) in names, "dropout on something other than a parameter"
        assert names[id(inp)] not in out, "two masks for one matrix in one call"
        out[names[id(inp)]] = sample
    return out


def inputs() -> tuple[Tensor, Tensor]:
    return torch.randn(T, B, D, dtype=torch.float64), torch.randn(B, C, dtype=torch.float64)


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_the_kernels_read_the_dropped_weights(name, recorder):
    """A training call equals the same layer without the option holding the dropped samples:
    one mask per matrix, shared by every step, read by the kernel; and the raw weights'
    gradients are the dropped weights' gradients through the mask."""
    make, targets = LAYERS[name]
    layer = make(weight_drop=P).double().train()
    x, ctx = inputs()
    out = run(layer, x, ctx)
    samples = dropped(layer, recorder)
    want = sorted(n for n, _ in layer.named_parameters() if n.rsplit(".", 1)[-1] in targets)
    assert sorted(samples) == want
    twin = copy.deepcopy(layer)
    twin.weight_drop = 0.0
    twin_params = dict(twin.named_parameters())
    with torch.no_grad():
        for n, sample in samples.items():
            twin_params[n].copy_(sample)
    recorder.calls.clear()
    twin_out = run(twin, x, ctx)
    assert recorder.calls == []
    torch.testing.assert_close(out, twin_out, rtol=0, atol=0)
    grad = torch.randn_like(out)
    out.backward(grad)
    twin_out.backward(grad)
    params = dict(layer.named_parameters())
    for n, sample in samples.items():
        raw = params[n]
        kept = (sample != 0).to(raw.dtype)
        assert 0 < kept.mean() < 1
        assert raw.grad is not None and raw.grad.abs().sum() > 0
        torch.testing.assert_close(raw.grad, twin_params[n].grad * kept / (1 - P))


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_a_fresh_mask_per_call_and_none_in_eval(name, recorder):
    make, _ = LAYERS[name]
    layer = make(weight_drop=P).double().train()
    plain = make().double()
    plain.load_state_dict(layer.state_dict())
    x, ctx = inputs()
    first, second = run(layer, x, ctx), run(layer, x, ctx)
    n = len(recorder.calls) // 2
    assert n > 0
    for (_, a), (_, b) in zip(recorder.calls[:n], recorder.calls[n:]):
        assert not torch.equal(a, b)
    assert not torch.equal(first, second)
    layer.eval()
    plain.eval()
    recorder.calls.clear()
    evaluated = run(layer, x, ctx)
    assert recorder.calls == []
    assert torch.equal(evaluated, run(plain, x, ctx))


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_zero_is_the_layer_without_the_option(name, recorder):
    make, _ = LAYERS[name]
    torch.manual_seed(1)
    zero = make(weight_drop=0.0).double().train()
    torch.manual_seed(1)
    plain = make().double().train()
    x, ctx = inputs()
    assert torch.equal(run(zero, x, ctx), run(plain, x, ctx))
    assert recorder.calls == []


@pytest.mark.parametrize("make", [
    lambda p: ctrlrnn.CARNN(D, H, context_size=C, variant="i", weight_drop=p),
    lambda p: ctrlrnn.CARNN(D, D, context_size=C, variant="s", weight_drop=p),
    lambda p: ctrlrnn.Metagross(D, H, weight_drop=p),
])
def test_layers_without_a_recurrent_matrix_refuse_it(make):
    with pytest.raises(ValueError, match=r"^weight_drop: .* has no recurrent weight matrix"):
        make(0.5)
    assert make(0.0).weight_drop == 0.0


def test_repr_shows_it():
    assert "weight_drop=0.25" in repr(ctrlrnn.QRNN(D, H, weight_drop=0.25))
    assert "weight_drop" not in repr(ctrlrnn.QRNN(D, H))
