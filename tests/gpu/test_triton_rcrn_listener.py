"""The Triton RCRN listener (``ctrlrnn.ops.rcrn_listener.triton_kernels``: RCRN eq 15-16, both
directions
in one launch) against the reference written from the equations, in Triton's CPU interpreter
(``conftest.py`` sets ``TRITON_INTERPRET=1``): values and gradients in fp32, fp64 and half
precision, strided inputs, lengths with a zero, the public op and an RCRN layer routed to it.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed (pip install 'ctrlrnn[gpu]')")

from kernel_routes import Spy, route, triton_module  # noqa: E402
from triton_tolerances import close  # noqa: E402

import ctrlrnn  # noqa: E402
from ctrlrnn.ops.rcrn_listener import rcrn_listener  # noqa: E402
from ctrlrnn.ops.rcrn_listener.reference import rcrn_listener_ref  # noqa: E402
from ctrlrnn.ops.rcrn_listener.triton_kernels import (  # noqa: E402
    rcrn_listener_backward,
    rcrn_listener_forward,
)

B, T, C = 3, 9, 20
_DTYPES = {"fp32": torch.float32, "fp64": torch.float64, "fp16": torch.float16,
           "bf16": torch.bfloat16}  # fmt: skip


def _case(dtype: str, split: int, sigmoid_gate: bool, extras: bool) -> Any:
    gate = "sigmoid" if sigmoid_gate else "identity"
    name = f"{dtype}-split{split}-{gate}-{'c0-lengths' if extras else 'plain'}"
    return pytest.param(_DTYPES[dtype], split, sigmoid_gate, extras, id=name)


# dtype, split (all channels forward, both directions, all reversed), output gate and extras
# (c0 and lengths) cross pairwise: each value of one meets each value of another in some case
# (they select independent branches of the kernels)
CASES = [
    _case("fp32", C, True, False),
    _case("fp32", 7, False, True),
    _case("fp32", 0, True, True),
    _case("fp64", C, False, True),
    _case("fp64", 7, True, False),
    _case("fp64", 0, False, False),
    _case("fp16", C, True, True),
    _case("fp16", 7, False, False),
    _case("fp16", 0, False, True),
    _case("bf16", C, False, False),
    _case("bf16", 7, True, True),
    _case("bf16", 0, True, False),
]


@pytest.mark.parametrize(("dtype", "split", "sigmoid_gate", "extras"), CASES)
def test_forward_backward(dtype, split, sigmoid_gate, extras):
    g = torch.Generator().manual_seed(4)
    hs = [torch.randn(T, B, C, generator=g).to(dtype).transpose(0, 1) for _ in range(3)]
    c0 = torch.randn(B, C, generator=g).to(dtype) if extras else None
    lens = torch.tensor([T, 4, 0]) if extras else None
    h4, c4, last = rcrn_listener_forward(*hs, c0, lens, split, sigmoid_gate)
    leaves = [h.double().requires_grad_() for h in hs]
    init = None if c0 is None else c0.double().requires_grad_()
    gate = "sigmoid" if sigmoid_gate else "identity"
    ref = rcrn_listener_ref(*leaves, init, lengths=lens, output_gate=gate, split=split)
    for got, want, name in zip((h4, c4, last), ref, ("h4", "c4", "last"), strict=True):
        close(got, want, dtype, name)
    grad_out = torch.randn(B, T, C, generator=g).to(dtype)
    grad_last = torch.randn(B, C, generator=g).to(dtype)
    d = rcrn_listener_backward(grad_out, grad_last, *hs, c4, c0, lens, split, sigmoid_gate)
    wrt = [*leaves, *([init] if init is not None else [])]
    want = torch.autograd.grad((ref[0], ref[2]), wrt, (grad_out.double(), grad_last.double()))
    for k, (x, y) in enumerate(zip(d, want)):
        close(x, y, dtype, f"d{k}")
    for x, h in zip(d[:3], hs, strict=True):
        assert x.stride() == h.stride()


def test_public_op_and_rcrn_layer_run_the_triton_kernels(monkeypatch):
    """A bidirectional RCRN (per-direction listener) routed to the Triton scan family calls the
    listener's kernels once forward and once backward, with the compiled path's results."""
    torch.manual_seed(0)
    m = ctrlrnn.RCRN(5, 6, bidirectional=True, batch_first=True, controllers="fused").double()
    x = torch.randn(3, 7, 5, dtype=torch.float64, requires_grad=True)
    lens = torch.tensor([7, 2, 5])
    out, _ = m(x, lengths=lens)
    want = torch.autograd.grad(out.square().sum(), (x, *m.parameters()))
    spy = route(monkeypatch, "scan", Spy(triton_module("scan")))
    out2, _ = m(x, lengths=lens)
    got = torch.autograd.grad(out2.square().sum(), (x, *m.parameters()))
    assert spy.calls == {"rcrn_listener_forward": 1, "rcrn_listener_backward": 1}
    torch.testing.assert_close(out2, out)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b)
    h = [torch.randn(2, 4, 6, dtype=torch.float64) for _ in range(3)]
    torch.testing.assert_close(rcrn_listener(*h, split=3)[0],
                               rcrn_listener_ref(*h, split=3)[0])
