"""The per-call shortcuts give what the general paths give, exactly: one step's causal windows
(:func:`ctrlrnn.nn.qrnn_windows.causal_windows`), the compiled ops without a ``Function`` node
where no graph is recorded, and the extension's loaded-module fast path under a switched
``CTRLRNN_BACKEND``."""

from __future__ import annotations

import pytest
import torch

import ctrlrnn
from ctrlrnn.nn import qrnn_windows
from ctrlrnn.ops import _extension, kernel_op


@pytest.mark.parametrize("window", [1, 2, 3])
@pytest.mark.parametrize("with_history", [False, True])
def test_one_step_windows_equal_the_shifted_windows(monkeypatch, window, with_history):
    x = torch.randn(3, 1, 5, requires_grad=True)
    hist = torch.randn(3, window - 1, 5) if with_history else None
    fast = qrnn_windows.causal_windows(x, window, hist)
    monkeypatch.setattr(qrnn_windows, "eager_ok", lambda *args: False)
    slow = qrnn_windows.causal_windows(x, window, hist)
    assert torch.equal(fast, slow)
    (gf,) = torch.autograd.grad(fast.square().sum(), x)
    (gs,) = torch.autograd.grad(slow.square().sum(), x)
    assert torch.equal(gf, gs)


def test_qrnn_decoding_steps_equal_with_and_without_function_nodes(monkeypatch):
    torch.manual_seed(0)
    qrnn = ctrlrnn.QRNN(6, 8, num_layers=2, window=2)
    x = torch.randn(4, 1, 6)

    def run() -> list[torch.Tensor]:
        outs, state = [], None
        with torch.no_grad():
            for t in range(4):
                out, state = qrnn.forward_stateful(x[t : t + 1], state)
                outs += [out, state[0]]
        return outs

    fast = run()
    monkeypatch.setattr(kernel_op, "_records_graph", lambda args: True)
    assert all(torch.equal(a, b) for a, b in zip(fast, run(), strict=True))


def test_backend_switch_still_read_at_every_call(monkeypatch):
    assert _extension.load("scan") is not None or _extension.forced_reference()
    monkeypatch.setenv("CTRLRNN_BACKEND", "reference")
    assert _extension.forced_reference() and _extension.load("scan") is None
    monkeypatch.setenv("CTRLRNN_BACKEND", "bogus")
    with pytest.raises(ValueError, match="CTRLRNN_BACKEND"):
        _extension.forced_reference()
    monkeypatch.delenv("CTRLRNN_BACKEND")
    assert not _extension.forced_reference()
