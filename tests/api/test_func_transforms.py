"""``torch.func`` transforms and higher-order gradients for every layer.

``torch.func.grad``, ``vjp`` and ``vmap`` of ``grad`` run the reference path (plain torch code)
and equal the gradients autograd computes on the compiled kernels. Double backward works on
the reference path (``gradgradcheck``); through a compiled kernel it raises one clear error that
names the op, the layers using it and the alternative.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch.func import functional_call, grad, vjp, vmap

import ctrlrnn

D64 = torch.float64
LAYERS: dict[str, Callable[[], torch.nn.Module]] = {
    "QRNN": lambda: ctrlrnn.QRNN(3, 4, num_layers=2, bidirectional=True, zoneout=0.2).eval(),
    "RCRN": lambda: ctrlrnn.RCRN(3, 4, bidirectional=True),
    "CASLSTM": lambda: ctrlrnn.CASLSTM(3, 4, num_layers=2),
    "CARNN-n": lambda: ctrlrnn.CARNN(3, 4, context_size=2, variant="n"),
    "CARNN-i": lambda: ctrlrnn.CARNN(3, 4, context_size=2, variant="i"),
    "Metagross": lambda: ctrlrnn.Metagross(3, 4, depth=2, bidirectional=True),
    "Metagross-lstm": lambda: ctrlrnn.Metagross(3, 4, depth=2, base="lstm", recurrence="c"),
    "Metagross-state": lambda: ctrlrnn.Metagross(3, 4, depth=2, gates="state"),
    "MetagrossFFN": lambda: ctrlrnn.MetagrossFFN(3, depth=2),
}


def _setup(name: str):
    torch.manual_seed(0)
    model = LAYERS[name]().to(D64)
    x = torch.randn(4, 2, 3, dtype=D64)  # (T, B, D)
    extra = (torch.randn(2, 2, dtype=D64),) if isinstance(model, ctrlrnn.CARNN) else ()
    lengths = {} if isinstance(model, ctrlrnn.MetagrossFFN) else {"lengths": torch.tensor([4, 2])}

    def loss(params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        out = functional_call(model, params, (x, *extra), lengths)
        out = out[0] if isinstance(out, tuple) else out
        return out.square().sum()

    params = {k: v.detach() for k, v in model.named_parameters()}
    return model, params, x, loss


def _autograd(params, x, loss):
    leaves = {k: v.clone().requires_grad_() for k, v in params.items()}
    xg = x.clone().requires_grad_()
    grads = torch.autograd.grad(loss(leaves, xg), [*leaves.values(), xg])
    return dict(zip(leaves, grads[:-1])), grads[-1]


@pytest.mark.parametrize("name", list(LAYERS))
def test_grad_and_vjp(name: str) -> None:
    _model, params, x, loss = _setup(name)
    want_p, want_x = _autograd(params, x, loss)  # compiled kernels, autograd
    got_p = grad(loss)(params, x)
    for k in params:
        torch.testing.assert_close(got_p[k], want_p[k])
    value, pullback = vjp(lambda x: loss(params, x), x)
    torch.testing.assert_close(pullback(torch.ones_like(value))[0], want_x)


@pytest.mark.parametrize("name", list(LAYERS))
def test_vmap_of_grad_gives_per_sample_gradients(name: str) -> None:
    _model, params, x, loss = _setup(name)
    samples = torch.stack([x, 2 * x, -x])  # three independent inputs
    per_sample = vmap(grad(loss), in_dims=(None, 0))(params, samples)
    for i in range(3):
        want, _ = _autograd(params, samples[i], loss)
        for k in params:
            torch.testing.assert_close(per_sample[k][i], want[k])


@pytest.mark.parametrize("name", list(LAYERS))
def test_double_backward(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    model, params, x, loss = _setup(name)
    xg = x.clone().requires_grad_()

    def first_grad(x: torch.Tensor) -> torch.Tensor:
        return torch.autograd.grad(loss(params, x), x, create_graph=True)[0]

    if isinstance(model, ctrlrnn.MetagrossFFN):  # no custom op: plain autograd throughout
        assert torch.autograd.gradcheck(first_grad, (xg,))
        return
    with pytest.raises(RuntimeError, match=r"double backward .* CTRLRNN_BACKEND=reference"):
        first_grad(xg).sum().backward()
    monkeypatch.setenv("CTRLRNN_BACKEND", "reference")
    assert torch.autograd.gradcheck(first_grad, (xg,))
