"""The CPU runtime behind the kernels (``ops/csrc/runtime/``, :mod:`ctrlrnn.ops.runtime`): the
setting picks it, :func:`~ctrlrnn.ops.runtime.use` switches it between calls without a rebuild,
the plain runtime really bypasses the machinery (no cached block, no measured GEMM path), and
every op gives the same values under either, to float32 rounding."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import torch

from ctrlrnn.ops import _extension, gemm_path, runtime
from ctrlrnn.ops.cached_linear import cached_linear
from ctrlrnn.ops.cells.lstm import lstm_sequence
from ctrlrnn.ops.linear_scan import linear_scan
from ctrlrnn.ops.metagross_level import metagross_level
from ctrlrnn.ops.qrnn_pooling import qrnn_pooling
from ctrlrnn.ops.rcrn_listener import rcrn_listener
from ctrlrnn.settings import SettingError

scan = _extension.load("scan")
pytestmark = pytest.mark.skipif(scan is None, reason="needs the compiled kernels")


@pytest.fixture
def restore_runtime():
    before = runtime.current()
    yield
    runtime.use(before)


def test_the_requested_runtime_serves_the_kernels() -> None:
    """What ``CTRLRNN_RUNTIME`` (or ``--runtime``) asks for is what the loaded kernels run."""
    _extension.load("cells")
    assert runtime.current() == runtime.requested()
    assert {m.runtime() for m in _extension.loaded_modules().values()} == {runtime.requested()}


def test_use_switches_every_loaded_extension_and_rejects_unknown_names(restore_runtime) -> None:
    cells = _extension.load("cells")
    for name in ("plain", "tuned", "plain"):
        runtime.use(name)
        assert runtime.current() == name
        assert scan.runtime() == name and cells.runtime() == name
    with pytest.raises(ValueError, match="fast"):
        runtime.use("fast")
    with pytest.raises(RuntimeError, match="set_runtime: expected 'tuned' or 'plain'"):
        scan.set_runtime("fast")
    assert runtime.current() == "plain"


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != "CTRLRNN_RUNTIME"}
    return subprocess.run([sys.executable, "-c", code], env={**full, **env},
                          capture_output=True, text=True, timeout=600, check=False)


def test_the_setting_reaches_the_kernels_and_a_bad_value_stops_them() -> None:
    code = ("from ctrlrnn.ops import _extension, runtime\n"
            "print(_extension.load('scan').runtime(), runtime.current())\n")
    for value, want in (("plain", "plain plain"), ("tuned", "tuned tuned"), ("", "tuned tuned")):
        done = _python(code, CTRLRNN_RUNTIME=value)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip().splitlines()[-1] == want
    done = _python(code, CTRLRNN_RUNTIME="fast")
    assert done.returncode != 0
    assert re.search(r"SettingError: CTRLRNN_RUNTIME='fast'", done.stderr), done.stderr



def test_a_bad_value_is_one_error_naming_the_variable(monkeypatch) -> None:
    monkeypatch.setenv("CTRLRNN_RUNTIME", "fast")
    with pytest.raises(SettingError, match=re.escape("CTRLRNN_RUNTIME='fast'")):
        runtime.requested()


def _blocks_taken() -> int:
    stats = scan.output_cache_stats()
    return stats[2] + stats[3]  # fresh allocations + reuses


@pytest.mark.parametrize("name", ["tuned", "plain"])
def test_only_the_tuned_runtime_takes_cached_blocks_and_measured_paths(name, restore_runtime):
    runtime.use(name)
    x = torch.randn(64, 128, 64)
    w = torch.randn(256, 64)  # the output (64, 128, 256) float32 is 8 MiB: a cached block
    before = _blocks_taken()
    gemm_path.uses(clear=True)
    out = cached_linear(x, w)
    torch.testing.assert_close(out, x @ w.t(), rtol=1e-5, atol=1e-4)
    taken = _blocks_taken() - before
    bulk = [k for k in gemm_path.uses() if k.startswith("bulk ")]
    if name == "tuned":
        assert taken == 1 and bulk
    else:
        assert taken == 0 and not bulk


def _ops(dtype: torch.dtype) -> dict[str, tuple[torch.Tensor, ...]]:
    """Each CPU op's outputs on one set of inputs, streaming stores forced on where a runtime
    has them (every output counts as large)."""
    g = torch.Generator().manual_seed(7)

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=dtype)

    B, T, H = 3, 9, 21
    return {
        "linear_scan": (linear_scan(torch.rand(B, T, H, generator=g, dtype=dtype), r(B, T, H)),),
        "qrnn_pooling": tuple(qrnn_pooling(r(B, T, 4 * H), pooling="ifo")),
        "rcrn_listener": tuple(rcrn_listener(r(B, T, H), r(B, T, H), r(B, T, H))),
        "metagross_level": tuple(metagross_level(r(B, T, 3, 2, H), None, None, None, None, None,
                                                 None, False)),
        "lstm": tuple(lstm_sequence(r(B, T, 4 * H), r(4 * H, H) / H)),
    }


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_every_op_agrees_under_both_runtimes(dtype, restore_runtime):
    before = scan.streaming_threshold()
    scan.set_streaming_threshold(0)
    try:
        runtime.use("tuned")
        tuned = _ops(dtype)
        runtime.use("plain")
        plain = _ops(dtype)
    finally:
        scan.set_streaming_threshold(before)
    tol = {"rtol": 2e-6, "atol": 2e-6} if dtype == torch.float32 else {"rtol": 0, "atol": 0}
    for name, outs in tuned.items():
        for a, b in zip(outs, plain[name], strict=True):
            torch.testing.assert_close(a, b, **tol, msg=name)
