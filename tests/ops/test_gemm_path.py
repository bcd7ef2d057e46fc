"""The GEMM path (ops/gemm_path.py, ops/csrc/gemm_path.h): both paths compute the same products,
every layer trains the same under either, the choice is measured, remembered and persisted, and
``CTRLRNN_GEMM`` forces it or fails loudly."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

import ctrlrnn
from ctrlrnn.ops import _extension, gemm_path

ext = _extension.load("scan")
pytestmark = pytest.mark.skipif(ext is None, reason="needs the compiled kernels")
PATHS = ["blas", "onednn"]


def _usable(path: str) -> None:
    if path == "onednn" and not ext.gemm_onednn_usable():
        pytest.skip("this torch runs no float32 GEMM on oneDNN")


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 5, 2), (33, 17, 65), (300, 64, 257)])
@pytest.mark.parametrize("layout", ["nn", "tn", "nt", "sliced"])
def test_gemm_equals_torch(path, shape, layout):
    _usable(path)
    M, K, N = shape
    a = torch.randn(M, K)
    b = torch.randn(K, N)
    if layout[0] == "t":
        a = a.t().contiguous().t()
    if layout[1:] == "t":
        b = b.t().contiguous().t()
    if layout == "sliced":  # rows of a wider buffer: neither contiguous nor a transpose
        a = torch.randn(M, K + 3)[:, 1 : K + 1]
    with gemm_path.use(path):
        got = ext.gemm(a, b)
    torch.testing.assert_close(got, a @ b, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("path", PATHS)
def test_other_dtypes_and_empty_take_torch(path):
    _usable(path)
    with gemm_path.use(path):
        a, b = torch.randn(4, 3, dtype=torch.float64), torch.randn(3, 5, dtype=torch.float64)
        assert torch.equal(ext.gemm(a, b), a @ b)
        assert ext.gemm(torch.randn(0, 3), torch.randn(3, 5)).shape == (0, 5)
        assert torch.equal(ext.gemm(torch.randn(4, 0), torch.randn(0, 5)), torch.zeros(4, 5))


def _layers():
    torch.manual_seed(0)
    yield "qrnn", ctrlrnn.QRNN(12, 16, num_layers=2, window=2, bidirectional=True), ()
    yield "caslstm", ctrlrnn.CASLSTM(12, 16, num_layers=2, bidirectional=True), ()
    yield "rcrn", ctrlrnn.RCRN(12, 16, bidirectional=True, controllers="fused"), ()
    yield "ncarnn", ctrlrnn.CARNN(12, 16, context_size=None, bidirectional=True), ()
    yield "metagross", ctrlrnn.Metagross(12, 16, depth=2, bidirectional=True), ()
    yield "metagross_state", ctrlrnn.Metagross(12, 16, depth=2, gates="state"), ()


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", [n for n, _, _ in _layers()])
def test_layers_match_the_reference_on_either_path(name, path, monkeypatch):
    """Forward and every gradient of each layer, compiled on ``path``, against the reference
    implementation (``CTRLRNN_BACKEND=reference``) in the same float32 weights."""
    _usable(path)
    layer = dict((n, m) for n, m, _ in _layers())[name]
    x = torch.randn(9, 5, 12)
    lengths = torch.tensor([9, 4, 7, 1, 9])

    def run():
        layer.zero_grad()
        xi = x.clone().requires_grad_()
        out, _ = layer(xi, lengths=lengths)
        (out * torch.linspace(-1, 1, out.shape[-1])).sum().backward()
        return [out.detach(), xi.grad] + [p.grad.clone() for p in layer.parameters()]

    monkeypatch.setenv("CTRLRNN_BACKEND", "reference")
    want = run()
    monkeypatch.delenv("CTRLRNN_BACKEND")
    with gemm_path.use(path):
        got = run()
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def test_choices_are_measured_and_listed():
    ext.gemm_table_clear()
    a, b = torch.randn(64, 96), torch.randn(96, 128)
    ext.gemm(a, b)
    table = gemm_path.table()
    key = f"bulk M64 K128 N128 nn t{torch.get_num_threads()}"
    assert key in table, table
    path, advantage = table[key]
    assert path in ("blas", "onednn") and advantage > 0
    assert (path == "onednn") == (advantage > 1.03) or not ext.gemm_onednn_usable()


def test_use_rejects_unknown_paths():
    with pytest.raises(ValueError, match="name"):
        with gemm_path.use("mkl"):
            pass


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, **env}
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True,
                          timeout=300)


def test_environment_forces_the_path():
    code = ("import torch; from ctrlrnn.ops import _extension, gemm_path; "
            "_extension.load('scan'); print(gemm_path.forced())")
    for value in ("blas", "auto", "BLAS"):
        r = _python(code, CTRLRNN_GEMM=value)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split()[-1] == value.lower()


def test_environment_rejects_unknown_values():
    r = _python("from ctrlrnn.ops import _extension; _extension.load('scan')", CTRLRNN_GEMM="mkl")
    assert r.returncode != 0
    assert "CTRLRNN_GEMM='mkl'" in r.stderr and "onednn" in r.stderr


def test_choices_persist_beside_the_build(tmp_path):
    code = ("import torch; from ctrlrnn.ops import _extension, gemm_path; "
            "e = _extension.load('scan'); e.gemm_table_clear(); "
            "e.gemm(torch.randn(40, 24), torch.randn(24, 72)); "
            "print(gemm_path._STORE['path'])")
    r = _python(code, CTRLRNN_GEMM="auto")
    assert r.returncode == 0, r.stderr
    store = r.stdout.strip().splitlines()[-1]
    saved = json.loads(open(store, encoding="utf-8").read())
    assert any(k.startswith("bulk M64 K32 N128 nn") for k in saved), saved
    # a new process starts with the saved choices (no measurement needed)
    r = _python("from ctrlrnn.ops import _extension, gemm_path; _extension.load('scan'); "
                "print(sorted(gemm_path.table()))")
    assert "bulk M64 K32 N128 nn" in r.stdout


def test_measuring_a_class_leaves_the_random_stream_alone():
    """A class measured mid-run must not draw from torch's generator: a resumed run (whose
    classes are already known) would otherwise get other dropout masks than the run it
    continues."""
    from ctrlrnn.ops.fused_cells import lstm_sequence

    with gemm_path.use("auto"):
        ext.gemm_table_clear()
        state = torch.get_rng_state()
        ext.gemm(torch.ones(48, 20), torch.ones(20, 36))  # a bulk class, measured now
        lstm_sequence(torch.zeros(6, 5, 4 * 24), torch.zeros(4 * 24, 24))  # per-step classes
        assert any(k.startswith("step ") for k in gemm_path.table())
        assert torch.equal(torch.get_rng_state(), state)
