"""The CUDA kernel of every compiled op runs with its inputs' device current
(:func:`ctrlrnn.ops.kernel_op._on`): Triton launches on the current device and its stream, so a
model on ``cuda:1`` with ``cuda:0`` current must switch, as the device guard of torch's own CUDA
kernels does. No GPU here: a tensor that reports a CUDA device stands in, and the device switch
is recorded."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
import torch

from ctrlrnn.ops import backend, kernel_op


class OnCuda(torch.Tensor):
    """A CPU tensor that says it lives on ``cuda:<index>``."""

    index = 1

    @property
    def is_cuda(self) -> bool:  # type: ignore[override]
        return True

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return torch.device("cuda", self.index)


def _on_cuda(index: int) -> torch.Tensor:
    t = torch.Tensor._make_subclass(OnCuda, torch.zeros(2))
    t.index = index
    return t


@pytest.fixture
def cuda_calls(monkeypatch):
    """``current`` device 0; the devices made current around each kernel call, in order."""
    state = {"current": 0, "seen": []}

    @contextlib.contextmanager
    def device(d):
        before, state["current"] = state["current"], torch.device(d).index
        try:
            yield
        finally:
            state["current"] = before

    def kernel(*args):
        state["seen"].append(state["current"])
        return [args[0]]

    monkeypatch.setattr(torch.cuda, "current_device", lambda: state["current"])
    monkeypatch.setattr(torch.cuda, "device", device)
    monkeypatch.setattr(backend, "kernel_for",
                        lambda family, where: SimpleNamespace(k=kernel))  # fmt: skip
    return state


def _run(*args):
    spec = kernel_op.Kernel("k", fallback=lambda *a: a[0], fake=lambda *a: a[0])
    return kernel_op._on("scan", "cuda", spec)(*args)


def test_a_kernel_runs_on_its_inputs_device(cuda_calls):
    out = _run(_on_cuda(1), 3)
    assert isinstance(out, tuple) and cuda_calls["seen"] == [1]
    assert cuda_calls["current"] == 0  # restored after the call
    _run(3, _on_cuda(0))  # the first tensor is on the current device: no switch
    _run(_on_cuda(2), _on_cuda(1))  # the first CUDA tensor decides
    assert cuda_calls["seen"] == [1, 0, 2]


def test_no_switch_without_cuda_tensors_or_on_cpu(cuda_calls):
    _run(torch.zeros(2), None)
    assert cuda_calls["seen"] == [0]
    spec = kernel_op.Kernel("k", fallback=lambda *a: a[0], fake=lambda *a: a[0])
    kernel_op._on("scan", "cpu", spec)(_on_cuda(1))  # the CPU table never switches
    assert cuda_calls["seen"] == [0, 0]
