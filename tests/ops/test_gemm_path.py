"""The GEMM path (ops/gemm_path.py, ops/csrc/runtime/gemm_paths.h): both paths compute the same
products, every layer trains the same under either, the choice is measured, remembered and
persisted, and ``CTRLRNN_GEMM`` forces it or fails loudly. The paths are the tuned runtime's:
every test runs under it (``--runtime plain`` or not)."""

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
pytestmark = [pytest.mark.skipif(ext is None, reason="needs the compiled kernels"),
              pytest.mark.usefixtures("tuned_runtime")]
PATHS = ["blas", "onednn", "blas1", "tiny"]


def _usable(path: str) -> None:
    if path == "onednn" and not ext.gemm_onednn_usable():
        pytest.skip("this torch runs no float32 GEMM on oneDNN")
    if path == "blas1" and not ext.gemm_one_thread_usable():
        pytest.skip("this torch's BLAS cannot be held to one thread")


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
    assert path in ("blas", "onednn", "blas1")
    if ext.gemm_onednn_usable():
        assert advantage > 0
        # oneDNN is taken only where it beat BLAS by the margin
        assert path != "onednn" or advantage > 1.03


def _mkl_local_threads_reset() -> int | None:
    """MKL's per-thread setting of the calling thread, reset to 0 (None without MKL)."""
    import ctypes
    from pathlib import Path

    lib = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
    fn = getattr(lib, "MKL_Set_Num_Threads_Local", None)
    return None if fn is None else int(fn(0))


@pytest.mark.parametrize("forced", ["blas1", "auto"])
def test_one_thread_path_restores_mkl_threads(forced):
    """The blas1 path holds MKL to the calling thread only while its product runs: afterwards
    the thread's MKL setting is back to torch's (0, none of its own), through the per-step
    GEMMs of a small batch (the case the path is for) and the bulk ones."""
    _usable("blas1")
    from ctrlrnn.ops.fused_cells import lstm_sequence

    if _mkl_local_threads_reset() is None:
        pytest.skip("no MKL in this torch")
    with gemm_path.use(forced):
        ext.gemm_table_clear()
        gemm_path.uses(clear=True)
        x = torch.randn(2, 7, 4 * 8, requires_grad=True)
        w = torch.randn(4 * 8, 8, requires_grad=True)
        lstm_sequence(x, w)[0].sum().backward()
        ext.gemm(torch.randn(3, 5), torch.randn(5, 4))
    assert _mkl_local_threads_reset() == 0
    if forced == "blas1":
        assert set(p for p, _ in gemm_path.uses().values()) <= {"blas1"}


def test_small_batches_run_their_products_on_the_calling_thread():
    """Where BLAS held to one thread is a candidate: a batch too small to split runs its time
    loop, and so its per-step products, on the calling thread with all its threads (classes
    ``t<threads>``); a batch that splits runs them inside its slices' parallel region (``t1``),
    where MKL is single-threaded already and the candidate is not offered."""
    _usable("blas1")
    threads = torch.get_num_threads()
    if threads < 2:
        pytest.skip("one thread: nothing to hold back")
    from ctrlrnn.ops.fused_cells import lstm_sequence

    with gemm_path.use("auto"):
        for batch, want in ((2, threads), (16, 1)):
            ext.gemm_table_clear()
            gemm_path.uses(clear=True)
            lstm_sequence(torch.randn(batch, 3, 4 * 8), torch.randn(4 * 8, 8))
            steps = {k: p for k, (p, _) in gemm_path.uses().items() if k.startswith("step ")}
            assert steps and all(k.endswith(f" t{want}") for k in steps), (batch, steps)
            assert set(steps.values()) <= {"blas", "onednn", "blas1", "tiny"}


@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("rows", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("inner", [1, 7, 64, 65])
@pytest.mark.parametrize("cols", [1, 17, 31, 32, 64, 65, 130, 256])
def test_tiny_kernel_equals_torch(rows, inner, cols, accumulate):
    """The tiny kernel (every register-block width and its tail, odd and even row counts) on
    rows of wider buffers (leading dimensions above the width), overwriting or accumulating."""
    torch.manual_seed(rows * 1000 + inner * 10 + cols)
    a = torch.randn(rows, inner + 3)[:, 2 : inner + 2]
    b = torch.randn(inner, cols)
    buf = torch.randn(rows, cols + 5)
    before = buf.clone()
    out = buf[:, 1 : cols + 1]
    want = a @ b + (out if accumulate else 0)
    ext.gemm_tiny(a, b, out, accumulate)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-4)
    # nothing outside the output's columns is written
    assert torch.equal(buf[:, 0], before[:, 0])
    assert torch.equal(buf[:, cols + 1 :], before[:, cols + 1 :])


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [(1, 256, 1024), (2, 200, 800), (8, 64, 300)])
def test_tiny_kernel_splits_wide_products_over_the_threads(shape, threads):
    """Products wide enough to split their column blocks over the threads (the batch-1 step of
    a wide layer) give the same result split or not."""
    rows, inner, cols = shape
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, b = torch.randn(rows, inner), torch.randn(inner, cols)
        out = torch.randn(rows, cols)
        want = a @ b + out
        ext.gemm_tiny(a, b, out, True)
    finally:
        torch.set_num_threads(before)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-3)


def test_tiny_kernel_rejects_what_it_cannot_run():
    with pytest.raises(RuntimeError, match="gemm_tiny"):
        ext.gemm_tiny(torch.randn(9, 4), torch.randn(4, 3), torch.empty(9, 3), False)
    with pytest.raises(RuntimeError, match="gemm_tiny"):
        ext.gemm_tiny(torch.randn(2, 4, dtype=torch.float64), torch.randn(4, 3), torch.empty(2, 3),
                      False)


def test_forced_tiny_runs_the_small_per_step_products_only():
    """CTRLRNN_GEMM=tiny: the per-step products of a batch of a few rows take the tiny kernel,
    every other product (input projections, weight gradients) BLAS."""
    from ctrlrnn.ops.fused_cells import lstm_sequence

    with gemm_path.use("tiny"):
        gemm_path.uses(clear=True)
        x = torch.randn(3, 5, 4 * 8, requires_grad=True)
        w = torch.randn(4 * 8, 8, requires_grad=True)
        lstm_sequence(x, w)[0].sum().backward()
        ext.gemm(torch.randn(3, 5), torch.randn(5, 4))
        used = gemm_path.uses()
    steps = {p for k, (p, _) in used.items() if k.startswith("step ")}
    others = {p for k, (p, _) in used.items() if not k.startswith("step ")}
    assert steps == {"tiny"}, used
    assert others <= {"blas"}, used


def test_use_rejects_unknown_paths():
    with pytest.raises(ValueError, match="name"):
        with gemm_path.use("mkl"):
            pass


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "CTRLRNN_RUNTIME": "tuned", **env}
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


def test_saving_adds_to_the_store_rather_than_replacing_it(tmp_path, monkeypatch):
    """A process whose table lacks classes another process stored (it measured others, or
    cleared its table) keeps them in the store when it saves its own."""
    store = tmp_path / "gemm-paths.json"
    other = {"step M7 K8 N16 nt t9": ["tiny", 0.5], "bulk M8 K8 N8 nn t9": ["onednn", 1.5]}
    store.write_text(json.dumps(other), encoding="utf-8")
    monkeypatch.setitem(gemm_path._STORE, "path", store)
    monkeypatch.setitem(gemm_path._STORE, "saved", {})
    ext.gemm_table_clear()
    ext.gemm(torch.randn(40, 24), torch.randn(24, 72))
    mine = gemm_path.table()
    assert mine and not set(mine) & set(other)
    gemm_path.save()
    saved = json.loads(store.read_text(encoding="utf-8"))
    assert set(saved) == set(other) | set(mine)
    assert all(saved[k] == v for k, v in other.items())
    assert all(saved[k][0] == p for k, (p, _) in mine.items())
    # a choice measured again here replaces the stored one
    key = next(iter(mine))
    stale = ["onednn" if mine[key][0] != "onednn" else "blas", 9.0]
    store.write_text(json.dumps({**saved, key: stale}), encoding="utf-8")
    monkeypatch.setitem(gemm_path._STORE, "saved", {})
    gemm_path.save()
    assert json.loads(store.read_text(encoding="utf-8"))[key] == saved[key] != stale


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
