"""GPU backend selection: the decision rule, lazy Triton import, and a CPU install without it.

These tests need neither a GPU nor Triton (the ones that do skip themselves).
"""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
import torch

from ctrlrnn.ops import backend, gpu


@pytest.mark.parametrize(
    ("family", "device", "triton_ok", "forced", "expected"),
    [
        ("scan", "cuda", True, False, "triton"),
        ("cells", "cuda", True, False, "triton"),
        ("scan", "cuda", False, False, "reference"),
        ("scan", "cuda", True, True, "reference"),
        ("scan", "cpu", True, False, "cpu"),
        ("scan", "cpu", False, False, "cpu"),
        ("unknown", "cuda", True, False, "reference"),
        ("scan", "mps", True, False, "reference"),
    ],
)
def test_choose_backend(family, device, triton_ok, forced, expected):
    assert gpu.choose_backend(family, device, triton_ok, forced) == expected


def test_missing_triton_warns_once_and_uses_reference(monkeypatch):
    monkeypatch.setattr(gpu, "_TRITON", (False, "triton not importable (test)"))
    monkeypatch.setattr(gpu, "_WARNED", set())
    monkeypatch.delenv("CTRLRNN_BACKEND", raising=False)
    cuda = torch.device("cuda")
    with pytest.warns(RuntimeWarning, match="triton not importable"):
        assert backend.kernel_for("scan", cuda) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert backend.kernel_for("scan", cuda) is None  # warned once only
    assert backend._cuda_status("scan").startswith("reference: triton not importable")


def test_forced_reference_is_not_warned(monkeypatch):
    monkeypatch.setenv("CTRLRNN_BACKEND", "reference")
    monkeypatch.setattr(gpu, "_WARNED", set())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert backend.gpu_kernels("scan", torch.device("cuda")) is None
    assert "CTRLRNN_BACKEND=reference" in backend._cuda_status("scan")


def test_cpu_tensors_never_take_the_gpu_path():
    assert backend.gpu_kernels("scan", torch.device("cpu")) is None
    assert backend.gpu_kernels("cells", torch.device("cpu")) is None


def test_backend_info_reports_cuda():
    info = backend.backend_info()
    assert set(info["cuda"]) == {"available", "device", "triton", "step_graphs"}
    assert info["cuda"]["step_graphs"].startswith(("on:", "off:"))
    assert info["cuda"]["triton"] == gpu.triton_status()[1]
    for fam in info["families"].values():
        assert isinstance(fam["cuda"], str) and fam["cuda"]


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_import_does_not_import_triton():
    res = _run("import sys, ctrlrnn; ctrlrnn.linear_scan; print('triton' in sys.modules)")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "False"


def test_cpu_install_without_triton_keeps_working():
    code = (
        "import sys; sys.modules['triton'] = None\n"  # makes `import triton` raise ImportError
        "import torch, ctrlrnn\n"
        "from ctrlrnn.ops import backend\n"
        "g = torch.Generator().manual_seed(0)\n"
        "a = torch.rand(2, 5, 3, generator=g); b = torch.randn(2, 5, 3, generator=g)\n"
        # float32 tolerances: the compiled scan and the reference round differently near zero
        "torch.testing.assert_close(ctrlrnn.linear_scan(a, b), ctrlrnn.linear_scan_ref(a, b))\n"
        "info = backend.backend_info()\n"
        "assert 'not importable' in info['cuda']['triton'], info['cuda']\n"
        "assert info['families']['scan']['cuda'].startswith('reference'), info\n"
        "print('ok')\n"
    )
    res = _run(code)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().endswith("ok")


def test_cuda_selection_returns_the_triton_modules():
    pytest.importorskip("triton", reason="triton is not installed (pip install 'ctrlrnn[gpu]')")
    cuda = torch.device("cuda")
    scan = backend.kernel_for("scan", cuda)
    assert scan is not None and scan.__name__ == "ctrlrnn.ops.gpu.scan_and_pooling"
    for name in ("linear_scan_forward", "linear_scan_backward", "qrnn_pooling_forward",
                 "qrnn_pooling_backward"):  # fmt: skip
        assert callable(getattr(scan, name))
    # the fused cells' module mirrors the CPU extension too: one op per cell serves both
    cells = backend.kernel_for("cells", cuda)
    assert cells is not None and cells is backend.gpu_kernels("cells", cuda)
    assert callable(cells.lstm_forward) and callable(cells.gru_backward)
