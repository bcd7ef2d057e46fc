"""The torch.compile path of the METAGROSS level gates equals the eager path (float32).

The level gates are the reference composition of :mod:`ctrlrnn.ops.metagross_level` (used on
CUDA and without the compiled extension); these tests force that path on CPU.
"""

from __future__ import annotations

import pytest
import torch

from ctrlrnn import Metagross
from ctrlrnn.nn import metagross_gates
from ctrlrnn.ops import backend


@pytest.fixture
def compiled_gates(monkeypatch):
    # the composition path: no compiled level kernel (the scan keeps its kernel)
    has_kernel = backend.has_kernel
    monkeypatch.setattr(backend, "has_kernel",
                        lambda family, device: family != "metagross" and has_kernel(family, device))
    metagross_gates.set_gate_backend("compiled")
    yield
    metagross_gates.set_gate_backend("auto")


def test_backend_choice_is_reported():
    assert metagross_gates.gate_backend(torch.zeros(4, dtype=torch.float64)) == "eager"
    big = torch.zeros(metagross_gates.COMPILE_MIN_NUMEL)
    assert metagross_gates.gate_backend(big).startswith(("compiled", "eager (torch.compile"))
    with pytest.raises(ValueError, match="mode"):
        metagross_gates.set_gate_backend("fast")


def test_compiled_equals_eager(compiled_gates):
    torch.manual_seed(0)
    m = Metagross(8, 8, depth=2, bidirectional=True, batch_first=True)
    x = torch.randn(3, 6, 8, requires_grad=True)
    lengths = torch.tensor([6, 4, 2])

    def run():
        out, h_n, (alpha, _) = m(x, lengths=lengths, return_gates=True)
        loss = out.square().sum() + h_n.sum() + alpha.sum()
        grads = torch.autograd.grad(loss, [x, *m.parameters()])
        return out, h_n, grads

    out_c, h_c, g_c = run()
    assert metagross_gates.gate_backend(torch.zeros(1)) == "compiled"
    metagross_gates.set_gate_backend("eager")
    out_e, h_e, g_e = run()
    torch.testing.assert_close(out_c, out_e, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(h_c, h_e, rtol=1e-5, atol=1e-6)
    for a, b in zip(g_c, g_e):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
