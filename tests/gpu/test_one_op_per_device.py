"""One custom op per op serves every device: each op has its CPU kernel and its CUDA kernel
registered on the same ``torch.library`` op, and the op's CUDA dispatch key runs the Triton
kernels (CUDA and Triton's availability mocked; the kernels run on CPU tensors in Triton's
interpreter, the op reached through the dispatcher with ``redispatch`` to the key), while its
CPU key runs the compiled extension: both give the same values and gradients.
"""

from __future__ import annotations

import os

os.environ["CTRLRNN_REQUIRE_COMPILED"] = "1"  # a broken build must fail, not fall back

import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip("triton", reason="triton is not installed (pip install 'ctrlrnn[gpu]')")

from kernel_routes import Spy, cuda_and_triton, triton_module  # noqa: E402,F401

import ctrlrnn  # noqa: E402,F401  (registers every op)
from ctrlrnn.ops import backend  # noqa: E402
from ctrlrnn.ops.cells import cas_lstm, gru, lstm, metagross_state, ncarnn  # noqa: E402

CELLS = {"lstm": lstm, "gru": gru, "cas_lstm": cas_lstm, "ncarnn": ncarnn,
         "metagross_state": metagross_state}  # fmt: skip
SCAN_OPS = ("linear_scan", "qrnn_pooling", "rcrn_listener", "metagross_level")
OPS = [*(f"{op}{way}" for op in SCAN_OPS for way in ("", "_backward")),
       *(f"{cell}_cell_{way}" for cell in CELLS for way in ("fwd", "bwd"))]  # fmt: skip
CPU = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
CUDA = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA)
B, T, H = 3, 4, 5


@pytest.mark.parametrize("name", OPS)
def test_every_op_has_a_cpu_and_a_cuda_kernel(name):
    for key in ("CPU", "CUDA"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"ctrlrnn::{name}", key), key


def test_no_op_is_cuda_only():
    """No second stack of GPU ops beside the CPU ones."""
    ops = [n for n in torch._C._dispatch_get_all_op_names() if n.startswith("ctrlrnn::")]
    assert not [n for n in ops if n.startswith("ctrlrnn::gpu_")]
    assert {f"ctrlrnn::{n}" for n in OPS} <= set(ops)


def _cell_inputs(cell: str) -> list[torch.Tensor | None]:
    g = torch.Generator().manual_seed(len(cell))

    def r(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return scale * torch.randn(*shape, generator=g, dtype=torch.float64)

    h0 = r(B, H)
    if cell == "lstm":
        return [r(B, T, 4 * H), r(4 * H, H, scale=0.4), h0, r(B, H)]
    if cell == "gru":
        return [r(B, T, 3 * H), r(3 * H, H, scale=0.4), r(3 * H), h0]
    if cell == "cas_lstm":
        lam = torch.rand(H, generator=g, dtype=torch.float64)
        return [r(B, T, 5 * H), r(5 * H, H, scale=0.4), r(B, T, H), 1 - lam, lam, None, h0,
                r(B, H)]  # fmt: skip
    if cell == "ncarnn":
        return [r(B, T, 3 * H), r(2 * H, H, scale=0.4), r(B, 2 * H), h0]
    gates = torch.rand(B, T, 1, generator=g, dtype=torch.float64)  # depth 2: 3 units, 1 internal
    return [r(B, T, 9 * H), r(9 * H, H, scale=0.4), gates, 1 - gates, r(B, T, H), h0]


def _run_cell(cell: str, keys: torch._C.DispatchKeySet) -> list[torch.Tensor]:
    """The cell's forward and backward ops through the dispatcher's ``keys``: outputs (states
    and final states) and every input's gradient."""
    module = CELLS[cell]
    spec = module.CELL
    inputs = _cell_inputs(cell)
    lengths = torch.tensor([T, 0, 2])
    fwd = getattr(torch.ops.ctrlrnn, f"{cell}_cell_fwd").default
    bwd = getattr(torch.ops.ctrlrnn, f"{cell}_cell_bwd").default
    outputs = fwd.redispatch(keys, *inputs, lengths, True)
    named = {**dict(zip(spec.args, inputs, strict=True)),
             **dict(zip(spec.outputs, outputs, strict=True))}  # fmt: skip
    g = torch.Generator().manual_seed(7)
    grads = [torch.randn(o.shape, generator=g, dtype=o.dtype) for o in outputs[:-1]]
    dinputs = bwd.redispatch(keys, *grads, *(named[n] for n in spec.saved), lengths)
    return [*outputs[:-1], *(d for d, x in zip(dinputs, inputs, strict=True) if x is not None)]


@pytest.mark.usefixtures("cuda_and_triton")
@pytest.mark.parametrize("cell", sorted(CELLS))
def test_cell_op_serves_cpu_and_cuda(cell, monkeypatch):
    spy = Spy(triton_module("cells"))
    monkeypatch.setattr(backend, "gpu_kernels", lambda family, device: spy)
    on_cpu = _run_cell(cell, CPU)
    assert spy.calls == {}  # the CPU key: the compiled extension
    on_cuda = _run_cell(cell, CUDA)
    assert spy.calls == {f"{cell}_forward": 1, f"{cell}_backward": 1}  # the CUDA key: Triton
    for k, (a, b) in enumerate(zip(on_cpu, on_cuda, strict=True)):
        torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-9, msg=f"{cell}: tensor {k}")


@pytest.mark.usefixtures("cuda_and_triton")
def test_scan_op_serves_cpu_and_cuda(monkeypatch):
    spy = Spy(triton_module("scan"))
    monkeypatch.setattr(backend, "gpu_kernels", lambda family, device: spy)
    g = torch.Generator().manual_seed(3)
    a = torch.rand(B, T, H, generator=g, dtype=torch.float64)
    b = torch.randn(B, T, H, generator=g, dtype=torch.float64)
    h0 = torch.randn(B, H, generator=g, dtype=torch.float64)
    lengths = torch.tensor([T, 0, 2])
    grad = torch.randn(B, T, H, generator=g, dtype=torch.float64)
    results = []
    for keys in (CPU, CUDA):
        out, last = torch.ops.ctrlrnn.linear_scan.default.redispatch(keys, a, b, h0, lengths,
                                                                     True)  # fmt: skip
        grads = torch.ops.ctrlrnn.linear_scan_backward.default.redispatch(
            keys, grad, None, a, out, h0, lengths, True
        )
        results.append([out, last, *grads])
    assert spy.calls == {"linear_scan_forward": 1, "linear_scan_backward": 1}
    for x, y in zip(*results, strict=True):
        torch.testing.assert_close(x, y)


@pytest.mark.usefixtures("cuda_and_triton")
def test_rcrn_listener_op_serves_cpu_and_cuda(monkeypatch):
    spy = Spy(triton_module("scan"))
    monkeypatch.setattr(backend, "gpu_kernels", lambda family, device: spy)
    g = torch.Generator().manual_seed(4)
    hs = [torch.randn(T, B, 2 * H, generator=g, dtype=torch.float64).transpose(0, 1)
          for _ in range(3)]
    c0 = torch.randn(B, 2 * H, generator=g, dtype=torch.float64)
    lengths = torch.tensor([T, 0, 2])
    grad = torch.randn(B, T, 2 * H, generator=g, dtype=torch.float64)
    results = []
    for keys in (CPU, CUDA):
        h4, c4, last = torch.ops.ctrlrnn.rcrn_listener.default.redispatch(
            keys, *hs, c0, lengths, H, True)
        grads = torch.ops.ctrlrnn.rcrn_listener_backward.default.redispatch(
            keys, grad, None, *hs, c4, c0, lengths, H, True)
        results.append([h4, c4, last, *grads])
    assert spy.calls == {"rcrn_listener_forward": 1, "rcrn_listener_backward": 1}
    for x, y in zip(*results, strict=True):
        torch.testing.assert_close(x, y)
