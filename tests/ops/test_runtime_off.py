"""``CTRLRNN_RUNTIME_OFF`` (:func:`ctrlrnn.ops.runtime.switch_off`): each of the three tuned
mechanisms without a variable of their own switches off alone, the calls then take the other
path (the runtime's use counts say which), and the values stay those of the path with it on."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import torch

from ctrlrnn import settings
from ctrlrnn.ops import _extension, backend, fused_cells, runtime
from ctrlrnn.ops.cells.lstm import lstm_sequence
from ctrlrnn.ops.qrnn_pooling import qrnn_pooling
from ctrlrnn.settings import SettingError

cells = _extension.load("cells")
pytestmark = [pytest.mark.skipif(cells is None, reason="needs the compiled kernels"),
              pytest.mark.usefixtures("tuned_runtime", "all_on")]


@pytest.fixture
def all_on():
    runtime.switch_off()
    runtime.mechanism_uses(clear=True)
    yield
    runtime.switch_off()


def test_the_setting_takes_a_comma_list_of_mechanisms_and_names_itself_when_wrong() -> None:
    read = settings.SETTINGS["CTRLRNN_RUNTIME_OFF"].read
    assert read(None) == () and read("") == ()
    assert read(" Stacked_Outputs, packed_gemm ") == ("packed_gemm", "stacked_outputs")
    with pytest.raises(SettingError, match=re.escape("CTRLRNN_RUNTIME_OFF='poly_exp,cache'")):
        read("poly_exp,cache")
    with pytest.raises(ValueError, match="names"):
        runtime.switch_off("cache")
    with pytest.raises(RuntimeError, match="set_runtime_off: expected names"):
        cells.set_runtime_off(["cache"])


@pytest.mark.not_plain("a setting read in a child process; no kernel's values")
def test_the_setting_reaches_the_kernels() -> None:
    code = ("from ctrlrnn.ops import _extension\n"
            "print('off=' + ','.join(_extension.load('scan').runtime_off()))\n")
    for value, want in (("poly_exp,stacked_outputs", "poly_exp,stacked_outputs"), ("", "")):
        env = {k: v for k, v in os.environ.items() if k != "CTRLRNN_RUNTIME"}
        done = subprocess.run([sys.executable, "-c", code], env={**env, runtime.OFF_ENV: value},
                              capture_output=True, text=True, timeout=600, check=False)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip().splitlines()[-1] == f"off={want}"


def _lstm() -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(3)
    B, T, H = 4, 16, 32
    return tuple(lstm_sequence(torch.randn(B, T, 4 * H, generator=g),
                               torch.randn(4 * H, H, generator=g) / H))


def test_packed_gemm_off_leaves_the_weights_unpacked() -> None:
    if not cells.mkl_packed_gemm():
        pytest.skip("no MKL packed GEMM in this torch")
    before = cells.gemm_forced()
    cells.gemm_force(0)  # BLAS, the path that packs
    try:
        on = _lstm()
        assert runtime.mechanism_uses(clear=True)["packed_gemm"] > 0
        runtime.switch_off("packed_gemm")
        off = _lstm()
        assert runtime.mechanism_uses()["packed_gemm"] == 0
    finally:
        cells.gemm_force(before)
    for a, b in zip(on, off, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def _pooling() -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(5)
    return tuple(qrnn_pooling(4 * torch.randn(8, 64, 4 * 48, generator=g), pooling="ifo"))


def test_poly_exp_off_gives_std_exp_s_values() -> None:
    """With poly_exp off the pooling's values are the plain runtime's bit for bit; with it on
    the polynomial's, which differ in some last bits."""
    poly = _pooling()
    assert runtime.mechanism_uses(clear=True)["poly_exp"] > 0
    runtime.switch_off("poly_exp")
    off = _pooling()
    assert runtime.mechanism_uses()["poly_exp"] == 0
    with runtime.using("plain"):
        plain = _pooling()
    assert all(torch.equal(a, b) for a, b in zip(off, plain, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(poly, plain, strict=True))
    for a, b in zip(poly, plain, strict=True):
        torch.testing.assert_close(a, b, rtol=2e-6, atol=2e-6)


def test_stacked_outputs_off_stacks_by_copying() -> None:
    if backend.path("cells", torch.device("cpu")) != backend.KERNEL:
        pytest.skip("the kernels are not in use")
    g = torch.Generator().manual_seed(9)
    T, H = 1024, 176  # each recurrence's h_seq over the output cache's 1 MiB minimum
    calls = [{"x_proj": torch.randn(1, T, 4 * H, generator=g),
              "weight_hh": torch.randn(4 * H, H, generator=g) / H} for _ in range(3)]
    whole = fused_cells.lstm_sequences(calls)
    assert runtime.mechanism_uses(clear=True)["stacked_outputs"] > 0
    runtime.switch_off("stacked_outputs")
    copied = fused_cells.lstm_sequences(calls)
    assert runtime.mechanism_uses()["stacked_outputs"] == 0
    assert runtime.switched_off() == ("stacked_outputs",)
    for one, other in zip(whole, copied, strict=True):
        assert all(torch.equal(a, b) for a, b in zip(one, other, strict=True))
