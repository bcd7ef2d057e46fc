"""The CUDA dispatch table: with CUDA and Triton available, no op family falls back to the
reference. CUDA availability and Triton's import are mocked; no kernel runs.

Every layer reaches the GPU through three families: ``scan`` (the linear scan of QRNN's
pooling, RCRN's listener, iCARNN/sCARNN, METAGROSS's RNN bases; QRNN f/fo/ifo pooling),
``cells`` (the fused LSTM and GRU of RCRN's controllers, CAS-LSTM layer 1 and l > 1, nCARNN,
METAGROSS as printed)
and ``metagross`` (the fused level, gates + scan).
"""

from __future__ import annotations

import pytest
import torch

from ctrlrnn.ops import backend, gpu

pytest.importorskip("triton", reason="triton is not installed (pip install 'ctrlrnn[gpu]')")

from kernel_routes import cuda_and_triton  # noqa: E402,F401

CUDA = torch.device("cuda")


def test_every_family_has_gpu_kernels():
    from ctrlrnn.ops import _extension

    assert set(_extension.EXTENSIONS) <= set(gpu.FAMILIES)
    for family in gpu.FAMILIES:
        assert gpu.choose_backend(family, "cuda", triton_ok=True) == "triton"


@pytest.mark.usefixtures("cuda_and_triton")
@pytest.mark.parametrize("family", sorted(gpu.FAMILY_FUNCTIONS))
def test_family_modules_expose_every_function(family):
    module = backend.gpu_kernels(family, CUDA)
    assert module is not None and module.__name__ == gpu.FAMILIES[family]
    assert gpu.missing_functions(family) == []


@pytest.mark.usefixtures("cuda_and_triton")
def test_cells_cover_every_cell():
    cells = backend.gpu_kernels("cells", CUDA)
    for cell in ("lstm", "gru", "cas_lstm", "ncarnn", "metagross_state"):
        for way in ("forward", "backward"):
            assert callable(getattr(cells, f"{cell}_{way}", None)), f"no {cell}_{way}"


@pytest.mark.usefixtures("cuda_and_triton")
@pytest.mark.parametrize("family", sorted(gpu.FAMILIES))
def test_every_family_chooses_triton(family):
    module = backend.kernel_for(family, CUDA)
    assert module is not None and module.__name__ == gpu.FAMILIES[family]
    assert backend.has_kernel(family, CUDA)


@pytest.mark.usefixtures("cuda_and_triton")
@pytest.mark.parametrize("family", sorted(gpu.FAMILIES))
def test_public_ops_take_the_kernel_path_on_cuda(family):
    assert backend.path(family, CUDA) == backend.KERNEL  # not the reference


@pytest.mark.usefixtures("cuda_and_triton")
def test_info_reports_triton_for_every_family():
    for family in gpu.FAMILIES:
        line = backend._cuda_status(family)
        assert "reference" not in line and "kernels" in line, (family, line)
        assert "no CUDA device" not in line
    assert "CAS-LSTM and nCARNN" in backend._cuda_status("cells")
    assert "METAGROSS" in backend._cuda_status("metagross")


@pytest.mark.usefixtures("cuda_and_triton")
def test_info_names_a_missing_cell_function(monkeypatch):
    monkeypatch.setitem(gpu.FAMILY_FUNCTIONS, "cells", (*gpu.CELL_FUNCTIONS, "no_such_sequence"))
    assert "reference for no_such_sequence" in backend._cuda_status("cells")


def test_without_triton_every_family_says_reference(monkeypatch):
    monkeypatch.setattr(gpu, "_TRITON", (False, "triton not importable (test)"))
    for family in gpu.FAMILIES:
        assert backend._cuda_status(family).startswith("reference")
