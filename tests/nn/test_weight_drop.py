"""``weight_drop=``, for every layer configuration of :mod:`contract`: DropConnect on the QRNN's
convolution weights and on the recurrent matrices of the fused-cell layers, as AWD-LSTM applies
it (one mask per matrix per forward call, inverted scaling, the weights themselves in
evaluation); the layers without a recurrent matrix refuse it."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from contract import LAYERS, NAMES, context, make
from torch import Tensor, nn

import ctrlrnn
from ctrlrnn.nn import base

T, B, D, H = 4, 3, 4, 6
P = 0.4

# tiny shapes: the compiled kernels run inline, where a second thread would only be waited for
# (conftest.py)
pytestmark = pytest.mark.usefixtures("one_thread")


def drop_targets(layer: nn.Module) -> tuple[str, ...]:
    """The parameters DropConnect must reach: the QRNN's convolution weights, the recurrent
    matrices of the fused cells (none in iCARNN, sCARNN and METAGROSS's linear base reading its
    input alone)."""
    if isinstance(layer, ctrlrnn.QRNN):
        return ("weight",)
    if isinstance(layer, ctrlrnn.CARNN):
        return ("weight_hh",) if layer.variant == "n" else ()
    if isinstance(layer, ctrlrnn.Metagross):
        return (("weight_hh",) if layer.gates == "state" else ()) + (
            ("base_weight_hh",) if layer.base != "linear" else ())  # fmt: skip
    return ("weight_hh",)


#: zoneout (in training) draws its own random masks: the twin of a layer without the option
#: would not draw the same
TRAINED = [n for n in NAMES if not LAYERS[n].eval]
DROPPED = [n for n in TRAINED if drop_targets(make(n, D, H))]
REFUSED = [n for n in TRAINED if not drop_targets(make(n, D, H))]


def run(layer: nn.Module, x: Tensor, ctx: Tensor | None) -> Tensor:
    out, _ = layer(x, ctx) if isinstance(layer, ctrlrnn.CARNN) else layer(x)
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


def inputs(layer: nn.Module) -> tuple[Tensor, Tensor | None]:
    return torch.randn(T, B, D, dtype=torch.float64), context(layer, B, torch.float64)


@pytest.mark.parametrize("name", DROPPED)
def test_the_kernels_read_the_dropped_weights(name, recorder, monkeypatch):
    """A training call equals the same layer without the option holding the dropped samples:
    one mask per matrix, shared by every step, read by the kernel; and the raw weights'
    gradients are the dropped weights' gradients through the mask.

    A call with masks to draw runs the whole-sequence path; a short one without them may run
    by graph steps (:func:`ctrlrnn.nn.base.graph_steps_fit`), whose sums differ in the last
    bit: the twin is held to the whole-sequence path, so the two are compared bitwise."""
    monkeypatch.setattr(base, "graph_steps_fit", lambda module, x: False)
    layer = make(name, D, H, weight_drop=P).double().train()
    targets = drop_targets(layer)
    x, ctx = inputs(layer)
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


@pytest.mark.parametrize("name", DROPPED)
def test_a_fresh_mask_per_call_and_none_in_eval(name, recorder):
    layer = make(name, D, H, weight_drop=P).double().train()
    plain = make(name, D, H).double()
    plain.load_state_dict(layer.state_dict())
    x, ctx = inputs(layer)
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


@pytest.mark.parametrize("name", DROPPED)
def test_zero_is_the_layer_without_the_option(name, recorder):
    torch.manual_seed(1)
    zero = make(name, D, H, weight_drop=0.0).double().train()
    torch.manual_seed(1)
    plain = make(name, D, H).double().train()
    x, ctx = inputs(zero)
    assert torch.equal(run(zero, x, ctx), run(plain, x, ctx))
    assert recorder.calls == []


@pytest.mark.parametrize("name", REFUSED)
def test_layers_without_a_recurrent_matrix_refuse_it(name):
    with pytest.raises(ValueError, match=r"^weight_drop: .* has no recurrent weight matrix"):
        make(name, D, H, weight_drop=0.5)
    assert make(name, D, H, weight_drop=0.0).weight_drop == 0.0


def test_repr_shows_it():
    assert "weight_drop=0.25" in repr(ctrlrnn.QRNN(D, H, weight_drop=0.25))
    assert "weight_drop" not in repr(ctrlrnn.QRNN(D, H))
