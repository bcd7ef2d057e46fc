"""``torch.compile`` of a layer's forward and backward gives the eager gradients (of the input
and of every weight), with lengths: the custom ops trace (fake implementations, autograd
formulas) under TorchDynamo and AOT autograd, and Inductor compiles around them. The ops'
own cases are in ``tests/ops``; a compile that is a process's first call in
``tests/api/test_compile_first_call.py``.

Three steps and two sequences of different lengths: the reference path (``CTRLRNN_BACKEND=
reference``) is a loop over the steps that TorchDynamo unrolls, so every further step costs
tracing time and shows the graph capture nothing new. Inductor is asked for where it compiles
around ctrlrnn's custom ops (the compiled backend); the reference path holds plain torch ops
alone, so its graph capture is checked through AOT autograd without Inductor's code generation,
which would test torch rather than ctrlrnn."""

from __future__ import annotations

import pytest
import torch
from contract import make, run, states

pytestmark = pytest.mark.not_plain(
    "tests graph capture, not a kernel's values; the ops suites run the kernels on the plain "
    "runtime"
)

#: (configuration, input size, hidden size, its overrides, torch.compile backend)
CASES = [
    pytest.param("qrnn", 4, 8, dict(window=2), "inductor", id="qrnn"),
    pytest.param("qrnn-centred", 4, 8, {}, "inductor", id="qrnn-centred"),
    pytest.param("rcrn-concat", 4, 8, dict(num_layers=1), "aot_eager", id="rcrn-concat"),
    pytest.param(
        "caslstm-trainable", 4, 8, dict(num_layers=2), "aot_eager", id="caslstm-trainable"
    ),
]


@pytest.mark.parametrize(("name", "input_size", "hidden_size", "overrides", "backend"), CASES)
def test_forward_backward_equal_eager(name, input_size, hidden_size, overrides, backend,
                                      ctrlrnn_backend):
    if ctrlrnn_backend == "reference":
        backend = "aot_eager"
    torch.manual_seed(13)
    m = make(name, input_size, hidden_size, batch_first=True, **overrides)
    x = torch.randn(2, 3, input_size, requires_grad=True)
    lengths = torch.tensor([3, 2])

    def loss(x):
        out, h_n = run(m, x, lengths=lengths)
        return out.square().sum() + sum(s.sum() for s in states(h_n))

    compiled = torch.compile(loss, backend=backend, fullgraph=False)
    g1 = torch.autograd.grad(compiled(x), [x, *m.parameters()])
    g2 = torch.autograd.grad(loss(x), [x, *m.parameters()])
    for a, b in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
