"""ctrlrnn.compat.torchqrnn against torchqrnn's forward written out from its equations: the same
numbers for the same weights, its constructor arguments, save_prev_x/reset, zoneout, and a
``.linear`` that AWD-LSTM's weight-drop wrapper can wrap."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import ctrlrnn
from ctrlrnn.compat import torchqrnn
from ctrlrnn.compat.torchqrnn import QRNN, ForgetMult, QRNNLayer
from ctrlrnn.ops import backend

D64 = torch.float64


@pytest.fixture(autouse=True, params=["compiled", "reference"])
def ctrlrnn_backend(request, monkeypatch):
    """Every test on both paths: the compiled kernels and the reference (no compiler)."""
    if request.param == "reference":
        monkeypatch.setenv("CTRLRNN_BACKEND", "reference")
    else:
        monkeypatch.delenv("CTRLRNN_BACKEND", raising=False)
    assert backend.has_kernel("scan", torch.device("cpu")) == (request.param == "compiled")
    return request.param


def reference_layer(
    X: Tensor,
    weight: Tensor,
    bias: Tensor,
    *,
    window: int,
    output_gate: bool,
    hidden: Tensor | None = None,
    prev_x: Tensor | None = None,
    zoneout: float = 0.0,
    training: bool = False,
) -> tuple[Tensor, Tensor]:
    """torchqrnn's QRNNLayer.forward, time-major, written out: the source is [X, X_{t-1}]
    (current input first, X_{-1} = prevX or zeros), Y = source W^T + b split into Z, F, O;
    Z = tanh, F = sigmoid, O = sigmoid; zoneout in evaluation scales F by 1 - p; ForgetMult
    C_t = F_t Z_t + (1 - F_t) C_{t-1} (C_{-1} = hidden, none when absent); H = O C (or C)."""
    assert window in (1, 2) and not (training and zoneout)
    T, B, _ = X.shape
    if window == 1:
        source = X
    else:
        first = prev_x if prev_x is not None else X[:1] * 0
        source = torch.cat([X, torch.cat([first, X[:-1]], 0)], 2)
    Y = source @ weight.T + bias
    Hs = weight.shape[0] // (3 if output_gate else 2)
    Z = torch.tanh(Y[..., :Hs])
    Fg = torch.sigmoid(Y[..., Hs : 2 * Hs])
    if zoneout:
        Fg = Fg * (1 - zoneout)
    prev = None if hidden is None else hidden.reshape(B, Hs)
    cs = []
    for t in range(T):
        c = Fg[t] * Z[t]
        if prev is not None:
            c = c + (1 - Fg[t]) * prev
        cs.append(c)
        prev = c
    C = torch.stack(cs)
    out = torch.sigmoid(Y[..., 2 * Hs :]) * C if output_gate else C
    return out, C[-1:]


def layer64(*args, **kwargs) -> QRNNLayer:
    return QRNNLayer(*args, **kwargs).double()


@pytest.mark.parametrize("window", [1, 2])
@pytest.mark.parametrize("output_gate", [True, False])
@pytest.mark.parametrize("hidden_shape", [None, (3, 5), (1, 3, 5)])
def test_layer_equals_torchqrnn(window, output_gate, hidden_shape):
    layer = layer64(4, 5, window=window, output_gate=output_gate)
    assert isinstance(layer.linear, nn.Linear)
    assert layer.linear.weight.shape == ((3 if output_gate else 2) * 5, window * 4)
    X = torch.randn(7, 3, 4, dtype=D64)
    hidden = None if hidden_shape is None else torch.randn(*hidden_shape, dtype=D64)
    out, c_last = layer(X, hidden)
    want, want_c = reference_layer(X, layer.linear.weight, layer.linear.bias, window=window,
                                   output_gate=output_gate, hidden=hidden)
    assert out.shape == (7, 3, 5) and c_last.shape == (1, 3, 5)
    assert out.is_contiguous()
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(c_last, want_c)


def test_gradients_equal_torchqrnn():
    layer = layer64(4, 5, window=2)
    X = torch.randn(6, 2, 4, dtype=D64, requires_grad=True)
    hidden = torch.randn(2, 5, dtype=D64, requires_grad=True)
    out, c_last = layer(X, hidden)
    (out.sin().sum() + c_last.sum()).backward()
    got = [X.grad, hidden.grad, layer.linear.weight.grad, layer.linear.bias.grad]
    X2, h2 = X.detach().requires_grad_(), hidden.detach().requires_grad_()
    w2 = layer.linear.weight.detach().requires_grad_()
    b2 = layer.linear.bias.detach().requires_grad_()
    ref, ref_c = reference_layer(X2, w2, b2, window=2, output_gate=True, hidden=h2)
    (ref.sin().sum() + ref_c.sum()).backward()
    for g, w in zip(got, [X2.grad, h2.grad, w2.grad, b2.grad]):
        torch.testing.assert_close(g, w)


def test_hidden_size_defaults_to_input_size():
    assert QRNNLayer(6).hidden_size == 6
    assert QRNNLayer(6).linear.out_features == 18


def test_zoneout_in_evaluation_scales_f_by_its_keep_rate():
    layer = layer64(4, 5, window=2, zoneout=0.3).eval()
    X = torch.randn(6, 2, 4, dtype=D64)
    out, c_last = layer(X)
    want, want_c = reference_layer(X, layer.linear.weight, layer.linear.bias, window=2,
                                   output_gate=True, zoneout=0.3)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(c_last, want_c)


def test_zoneout_in_training_keeps_the_previous_state():
    """torchqrnn's training zoneout multiplies F by a Bernoulli(1 - p) mask: where the mask is 0
    the state keeps C_{t-1}; elsewhere it takes the full update; about p of them are kept."""
    p = 0.4
    layer = layer64(3, 64, zoneout=p, output_gate=False).train()
    X = torch.randn(20, 8, 3, dtype=D64)
    C, _ = layer(X)  # without the output gate H = C
    Y = layer.linear(X).detach()
    Z, Fg = torch.tanh(Y[..., :64]), torch.sigmoid(Y[..., 64:])
    prev = torch.zeros(8, 64, dtype=D64)
    kept = 0
    for t in range(20):
        update = Fg[t] * Z[t] + (1 - Fg[t]) * prev
        held = torch.isclose(C[t], prev, rtol=0, atol=1e-12)
        assert torch.allclose(C[t][~held], update[~held])
        kept += int(held.sum())
        prev = C[t]
    assert abs(kept / C.numel() - p) < 0.03


def test_save_prev_x_continues_the_stream_and_reset_forgets_it():
    layer = layer64(4, 5, window=2, save_prev_x=True)
    X = torch.randn(9, 3, 4, dtype=D64)
    whole, c_whole = layer(X)
    layer.reset()
    first, c1 = layer(X[:4])
    assert layer.prevX is not None and layer.prevX.shape == (1, 3, 4)
    assert torch.equal(layer.prevX, X[3:4]) and not layer.prevX.requires_grad
    second, c2 = layer(X[4:], c1)
    torch.testing.assert_close(torch.cat([first, second]), whole)
    torch.testing.assert_close(c2, c_whole)
    want, _ = reference_layer(X[4:], layer.linear.weight, layer.linear.bias, window=2,
                              output_gate=True, hidden=c1, prev_x=X[3:4])
    torch.testing.assert_close(second, want)
    layer.reset()
    assert layer.prevX is None
    fresh, _ = layer(X[4:], c1)
    torch.testing.assert_close(fresh, reference_layer(
        X[4:], layer.linear.weight, layer.linear.bias, window=2, output_gate=True, hidden=c1)[0])
    assert not torch.allclose(fresh[0], second[0])


def test_without_save_prev_x_nothing_is_kept():
    layer = layer64(4, 5, window=2)
    layer(torch.randn(3, 2, 4, dtype=D64))
    assert layer.prevX is None


@pytest.mark.parametrize("window", [3, 4])
def test_wider_windows_are_newest_first_and_stream(window):
    """Beyond torchqrnn's widths: the layout [x_t, x_{t-1}, ...] and a stream in chunks
    (including a chunk shorter than the window) equal one call."""
    layer = layer64(2, 3, window=window, save_prev_x=True)
    X = torch.randn(8, 2, 2, dtype=D64)
    whole, c_whole = layer(X)
    Y = layer.linear.weight
    padded = torch.cat([torch.zeros(window - 1, 2, 2, dtype=D64), X])
    source = torch.cat([padded[window - 1 - j : window - 1 - j + 8] for j in range(window)], 2)
    pre = source @ Y.T + layer.linear.bias
    Z, Fg, O = torch.tanh(pre[..., :3]), torch.sigmoid(pre[..., 3:6]), torch.sigmoid(pre[..., 6:])
    c = torch.zeros(2, 3, dtype=D64)
    outs = []
    for t in range(8):
        c = Fg[t] * Z[t] + (1 - Fg[t]) * c
        outs.append(O[t] * c)
    torch.testing.assert_close(whole, torch.stack(outs))
    layer.reset()
    pieces, hidden = [], None
    for start, stop in [(0, 1), (1, 5), (5, 8)]:
        out, hidden = layer(X[start:stop], hidden)
        pieces.append(out)
    torch.testing.assert_close(torch.cat(pieces), whole)
    torch.testing.assert_close(hidden, c_whole)


def test_a_saved_input_of_another_batch_size_asks_for_reset():
    layer = QRNNLayer(4, 5, window=2, save_prev_x=True)
    layer(torch.randn(3, 2, 4))
    with pytest.raises(ValueError, match=r"^X: .*call reset\(\)"):
        layer(torch.randn(3, 5, 4))
    layer.reset()
    layer(torch.randn(3, 5, 4))


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"hidden_size": 0}, "hidden_size"),
    ({"window": 0}, "window"),
    ({"zoneout": 1.0}, "zoneout"),
    ({"save_prev_x": "yes"}, "save_prev_x"),
    ({"output_gate": None}, "output_gate"),
])
def test_layer_arguments_are_checked(kwargs, name):
    with pytest.raises(ValueError, match=rf"^{name}: "):
        QRNNLayer(4, **kwargs)


@pytest.mark.parametrize(("X", "hidden", "name"), [
    (torch.randn(3, 4), None, "X"),
    (torch.randn(3, 2, 6), None, "X"),
    (torch.randn(3, 2, 4), torch.randn(2, 6), "hidden"),
    (torch.randn(3, 2, 4), torch.randn(2, 1, 2, 5), "hidden"),
])
def test_layer_inputs_are_checked(X, hidden, name):
    with pytest.raises(ValueError, match=rf"^{name}: "):
        QRNNLayer(4, 5)(X, hidden)


def test_use_cuda_is_accepted_and_the_tensors_choose_the_device():
    layer = QRNNLayer(4, 5, use_cuda=True)
    out, _ = layer(torch.randn(3, 2, 4))
    assert out.device.type == "cpu"


def test_state_dict_keys_are_torchqrnns():
    assert set(QRNNLayer(4, 5).state_dict()) == {"linear.weight", "linear.bias"}
    assert set(QRNN(4, 5, num_layers=2).state_dict()) == {
        "layers.0.linear.weight", "layers.0.linear.bias",
        "layers.1.linear.weight", "layers.1.linear.bias",
    }


def test_the_module_is_importable_both_ways():
    assert torchqrnn.QRNN is QRNN and torchqrnn.QRNNLayer is QRNNLayer


# ------------------------------------------------------------------ the stack


def test_stack_is_its_layers_in_turn():
    qrnn = QRNN(4, 5, num_layers=3, window=2, save_prev_x=True, output_gate=False,
                use_cuda=False).double().eval()
    assert isinstance(qrnn.layers, nn.ModuleList) and len(qrnn.layers) == 3
    assert all(l.window == 2 and l.save_prev_x and not l.output_gate for l in qrnn.layers)
    X = torch.randn(6, 2, 4, dtype=D64)
    hidden = torch.randn(3, 2, 5, dtype=D64)
    out, h_n = qrnn(X, hidden)
    assert out.shape == (6, 2, 5) and h_n.shape == (3, 2, 5)
    qrnn.reset()
    assert all(l.prevX is None for l in qrnn.layers)
    x, finals = X, []
    for i, layer in enumerate(qrnn.layers):
        x, c = reference_layer(x, layer.linear.weight, layer.linear.bias, window=2,
                               output_gate=False, hidden=hidden[i])
        finals.append(c)
    torch.testing.assert_close(out, x)
    torch.testing.assert_close(h_n, torch.cat(finals))


def test_stack_dropout_between_layers_in_training_only():
    qrnn = QRNN(4, 5, num_layers=2, dropout=0.5).double()
    X = torch.randn(6, 2, 4, dtype=D64)
    qrnn.eval()
    a, _ = qrnn(X)
    b, _ = qrnn(X)
    assert torch.equal(a, b)
    qrnn.train()
    c, _ = qrnn(X)
    assert not torch.allclose(a, c)


def test_stack_from_given_layers():
    layers = [QRNNLayer(4, 5, window=2), QRNNLayer(5, 5)]
    qrnn = QRNN(4, 5, num_layers=7, layers=layers)
    assert qrnn.num_layers == 2 and qrnn.layers[0] is layers[0]
    with pytest.raises(ValueError, match=r"^layers: "):
        QRNN(4, 5, layers=[QRNNLayer(4, 5), QRNNLayer(6, 5)])


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"bidirectional": True}, "bidirectional"),
    ({"batch_first": True}, "batch_first"),
    ({"bias": False}, "bias"),
    ({"dropout": 2.0}, "dropout"),
    ({"num_layers": 0}, "num_layers"),
])
def test_stack_arguments_are_checked(kwargs, name):
    with pytest.raises(ValueError, match=rf"^{name}: "):
        QRNN(4, 5, **kwargs)


def test_stack_refuses_unknown_layer_arguments():
    with pytest.raises(TypeError):
        QRNN(4, 5, bogus=1)


def test_forget_mult():
    f = torch.rand(5, 2, 3, dtype=D64)
    x = torch.randn(5, 2, 3, dtype=D64)
    h0 = torch.randn(2, 3, dtype=D64)
    out = ForgetMult()(f, x, h0)
    prev, want = h0, []
    for t in range(5):
        prev = f[t] * x[t] + (1 - f[t]) * prev
        want.append(prev)
    torch.testing.assert_close(out, torch.stack(want))


# ------------------------------------------------------------------ weight drop on .linear


class LinearWeightDrop(nn.Module):
    """The weight-drop wrapper of AWD-LSTM, as its model applies it to a QRNN layer's
    ``linear``: the named weights leave the module's parameters, come back as ``<name>_raw``,
    and before every call the module gets ``dropout(<name>_raw)`` as a plain attribute."""

    def __init__(self, module: nn.Module, weights: list[str], dropout: float = 0.0) -> None:
        super().__init__()
        self.module, self.weights, self.dropout = module, weights, dropout
        for name in weights:
            w = getattr(module, name)
            del module._parameters[name]
            module.register_parameter(name + "_raw", nn.Parameter(w.data))

    def forward(self, *args: Tensor) -> Tensor:
        for name in self.weights:
            raw = getattr(self.module, name + "_raw")
            setattr(self.module, name, F.dropout(raw, p=self.dropout, training=self.training))
        return self.module.forward(*args)


def test_weight_drop_wrapper_reaches_the_kernel():
    layer = layer64(4, 5, window=2)
    raw = layer.linear.weight.detach().clone()
    layer.linear = LinearWeightDrop(layer.linear, ["weight"], dropout=0.5)
    X = torch.randn(6, 3, 4, dtype=D64)
    layer.train()
    torch.manual_seed(3)
    out, _ = layer(X)
    dropped = layer.linear.module.weight  # the sample this call used
    assert not torch.equal(dropped, raw)
    want, _ = reference_layer(X, dropped, layer.linear.module.bias, window=2, output_gate=True)
    torch.testing.assert_close(out, want)
    out.sum().backward()
    grad = layer.linear.module.weight_raw.grad
    assert grad is not None and torch.all(grad[dropped == 0] == 0) and grad.abs().sum() > 0
    again, _ = layer(X)
    assert not torch.allclose(out, again)
    layer.eval()
    evaluated, _ = layer(X)
    torch.testing.assert_close(evaluated, reference_layer(
        X, raw, layer.linear.module.bias, window=2, output_gate=True)[0])


def test_native_weight_drop_equals_the_wrapper_for_one_mask():
    """ctrlrnn.QRNN(weight_drop=p) drops the same convolution weights: with one layer and the
    same sample of the (reordered, F-negated) weights, the compat layer and ctrlrnn's agree."""
    compat = layer64(4, 5, window=2)
    native = ctrlrnn.QRNN(4, 5, window=2).double()
    W, b = compat.linear.weight.detach(), compat.linear.bias.detach()
    sign = torch.ones(15, 1, dtype=D64)
    sign[5:10] = -1
    with torch.no_grad():  # ctrlrnn: columns oldest input first, f = sigmoid(-Y_F)
        native.cell(0).weight.copy_(torch.cat([W[:, 4:], W[:, :4]], 1) * sign)
        native.cell(0).bias.copy_(b * sign[:, 0])
    X = torch.randn(6, 3, 4, dtype=D64)
    torch.testing.assert_close(native(X)[0], compat(X)[0])
