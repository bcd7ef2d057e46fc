"""The CUDA dispatch table: with CUDA and Triton available, no op family falls back to the
reference. CUDA availability and Triton's import are mocked; no kernel runs.

Every layer reaches the GPU through three families: ``scan`` (the linear scan of QRNN's
pooling, RCRN's listener, iCARNN/sCARNN, METAGROSS's RNN bases; QRNN f/fo/ifo pooling),
``cells`` (the fused LSTM and GRU of RCRN's controllers, CAS-LSTM layer 1 and l > 1, nCARNN,
METAGROSS as printed)
and ``metagross`` (the fused level, gates + scan).
"""

from __future__ import annotations

import importlib

import pytest
import torch

from ctrlrnn.ops import backend, gpu

pytest.importorskip("triton", reason="triton is not installed (pip install 'ctrlrnn[gpu]')")

CUDA = torch.device("cuda")


@pytest.fixture
def cuda_and_triton(monkeypatch):
    """A machine with CUDA and an importable Triton, as far as the dispatch can tell."""
    monkeypatch.setattr(gpu, "_TRITON", (True, "triton (mocked)"))
    monkeypatch.setattr(gpu, "_WARNED", set())
    monkeypatch.delenv("CTRLRNN_BACKEND", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


def test_every_family_has_gpu_kernels():
    from ctrlrnn.ops import _extension

    assert set(_extension.EXTENSIONS) <= set(gpu.FAMILIES)
    for family in gpu.FAMILIES:
        assert gpu.choose_backend(family, "cuda", triton_ok=True) == "triton"


@pytest.mark.parametrize("family", sorted(gpu.FAMILY_FUNCTIONS))
def test_family_modules_expose_every_function(family, cuda_and_triton):
    module = backend.gpu_kernels(family, CUDA)
    assert module is not None and module.__name__ == gpu.FAMILIES[family]
    assert gpu.missing_functions(family) == []


def test_cells_cover_every_cell(cuda_and_triton):
    cells = backend.gpu_kernels("cells", CUDA)
    for name in ("lstm_sequence", "gru_sequence", "cas_lstm_sequence", "ncarnn_sequence",
                 "metagross_state_sequence"):
        assert callable(getattr(cells, name, None)), f"cells_triton lacks {name}"
    fused = importlib.import_module("ctrlrnn.ops.fused_cells")

    class _OnCuda:  # fused_cells dispatches on the tensor's device only
        device = CUDA

    assert fused._gpu_cells(_OnCuda()) is cells


@pytest.mark.parametrize("family", ["scan", "metagross"])
def test_ops_with_the_cpu_extension_api_choose_triton(family, cuda_and_triton):
    module = backend.kernel_for(family, CUDA)
    assert module is not None and module.__name__ == gpu.FAMILIES[family]
    assert backend.has_kernel(family, CUDA)


def test_public_ops_take_the_kernel_path_on_cuda(cuda_and_triton):
    level = importlib.import_module("ctrlrnn.ops.metagross_level")
    assert level._compiled_on(CUDA)  # not the reference composition
    for name in ("ctrlrnn.ops.linear_scan", "ctrlrnn.ops.qrnn_pooling"):
        mod = importlib.import_module(name)
        assert mod.kernel_for("scan", CUDA).__name__ == gpu.FAMILIES["scan"]


def test_info_reports_triton_for_every_family(cuda_and_triton):
    for family in gpu.FAMILIES:
        line = backend._cuda_status(family)
        assert "reference" not in line and "kernels" in line, (family, line)
        assert "no CUDA device" not in line
    assert "CAS-LSTM and nCARNN" in backend._cuda_status("cells")
    assert "METAGROSS" in backend._cuda_status("metagross")


def test_info_names_a_missing_cell_function(cuda_and_triton, monkeypatch):
    monkeypatch.setitem(gpu.FAMILY_FUNCTIONS, "cells", (*gpu.CELL_FUNCTIONS, "no_such_sequence"))
    assert "reference for no_such_sequence" in backend._cuda_status("cells")


def test_without_triton_every_family_says_reference(monkeypatch):
    monkeypatch.setattr(gpu, "_TRITON", (False, "triton not importable (test)"))
    for family in gpu.FAMILIES:
        assert backend._cuda_status(family).startswith("reference")
