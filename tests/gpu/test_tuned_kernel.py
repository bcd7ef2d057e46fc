"""``TunedKernel``: the autotuner runs on a key's first launch only, later launches call the
kernel with the configuration it chose, and both give the same results; and the GPU family
table's answer is kept until ``CTRLRNN_BACKEND`` or Triton's status changes.

Runs in Triton's CPU interpreter (``conftest.py``), on tiny tensors.
"""

from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton", reason="triton is not installed (pip install ctrlrnn[gpu])")

import triton.language as tl  # noqa: E402

from ctrlrnn.ops import gpu  # noqa: E402
from ctrlrnn.ops.gpu import _common  # noqa: E402


@triton.jit
def _scale_kernel(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * factor, mask=mask)


def _launch(tuned: _common.TunedKernel, x: torch.Tensor, factor: float) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    tuned.launch((n, x.dtype, x.device), lambda m: (triton.cdiv(n, m["BLOCK"]),),
                 x, out, n, factor)  # fmt: skip
    return out


def test_the_autotuner_runs_on_a_keys_first_launch_only(monkeypatch):
    tuned = _common.TunedKernel(_scale_kernel, key=["n"])
    calls = {"tuned": 0, "direct": 0}
    tuned_run, direct_run = tuned.tuned.run, tuned.kernel.run

    def count_tuned(*args, **kwargs):
        calls["tuned"] += 1
        return tuned_run(*args, **kwargs)

    def count_direct(*args, **kwargs):
        calls["direct"] += 1
        return direct_run(*args, **kwargs)

    monkeypatch.setattr(tuned.tuned, "run", count_tuned)
    monkeypatch.setattr(tuned.kernel, "run", count_direct)
    x = torch.arange(37, dtype=torch.float32)
    first = _launch(tuned, x, 2.0)
    assert calls["tuned"] == 1
    seen = dict(calls)
    second = _launch(tuned, x, 3.0)
    assert calls["tuned"] == seen["tuned"], "a known key went through the autotuner again"
    assert calls["direct"] == seen["direct"] + 1
    torch.testing.assert_close(first, x * 2.0, rtol=0, atol=0)
    torch.testing.assert_close(second, x * 3.0, rtol=0, atol=0)
    # another key (another length, another dtype) is tuned afresh
    _launch(tuned, torch.arange(5, dtype=torch.float32), 1.0)
    _launch(tuned, x.double(), 1.0)
    assert calls["tuned"] == seen["tuned"] + 2


def test_launch_options_carry_the_configs_warps_and_meta():
    config = triton.Config({"BLOCK": 128}, num_warps=1)
    options = _common._launch_options(config)
    assert options["BLOCK"] == 128 and options["num_warps"] == 1


def test_block_configs_keep_a_tiles_steps_within_a_warp():
    # one warp, or 4 channels a thread on several warps: the layouts measured fast
    for block, warps in _common.BLOCK_WARPS:
        assert warps == 1 or block == 4 * 32 * warps, (block, warps)


def test_family_module_follows_the_backend_setting_and_triton_status(monkeypatch):
    monkeypatch.setattr(gpu, "_TRITON", (True, "triton (mocked)"))
    monkeypatch.setattr(gpu, "_WARNED", set())
    monkeypatch.setattr(gpu, "_RESOLVED", {})
    monkeypatch.delenv("CTRLRNN_BACKEND", raising=False)
    assert gpu.family_module("scan") is not None
    assert gpu.family_module("scan") is gpu.family_module("scan")
    monkeypatch.setenv("CTRLRNN_BACKEND", "reference")
    assert gpu.family_module("scan") is None
    monkeypatch.delenv("CTRLRNN_BACKEND")
    assert gpu.family_module("scan") is not None
    monkeypatch.setattr(gpu, "_TRITON", (False, "triton not importable (test)"))
    with pytest.warns(RuntimeWarning, match="triton not importable"):
        assert gpu.family_module("scan") is None
