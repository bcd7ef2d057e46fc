"""The elementwise recurrences' compiled kernels flush subnormal float32 values to zero on x86
(``FlushSubnormals`` in csrc/kernel_common.h), forward and backward, where the references keep
them; normal values are untouched, and the calling thread's own setting is left as it was."""

from __future__ import annotations

import platform

import pytest
import torch

from ctrlrnn import linear_scan
from ctrlrnn.ops import backend
from ctrlrnn.ops.metagross_level import metagross_level
from ctrlrnn.ops.qrnn_pooling import qrnn_pooling

pytestmark = pytest.mark.skipif(
    platform.machine().lower() not in ("x86_64", "amd64", "i686", "x86"),
    reason="the kernels flush subnormals on x86 only")

T = 160
SUBNORMAL, NORMAL = 130, 100  # 0.5 ** 130 ~ 7.3e-40 is subnormal in float32, 0.5 ** 100 is not
HALVES = 0.5 ** torch.arange(T, dtype=torch.float64)


def _compiled(family: str) -> None:
    if not backend.has_kernel(family, torch.device("cpu")):
        pytest.skip(f"the compiled {family} kernels are not loaded")


def _decay_scan() -> torch.Tensor:
    """``h_t = 0.5 h_{t-1} + b_t`` from ``b_0 = 1``: ``h_t = 0.5 ** t``."""
    a = torch.full((1, T, 4), 0.5)
    b = torch.zeros(1, T, 4)
    b[:, 0] = 1.0
    return linear_scan(a, b)[0, :, 0]


def _decay_pooling() -> torch.Tensor:
    """f-pooling ``c_t = f c_{t-1} + (1 - f) z_t`` with ``f = 0.5``, ``z_0 = 1`` and ``z_t = 0``
    after: ``c_t = 0.5 ** (t + 1)``."""
    gates = torch.zeros(1, T, 8)  # [Z | F], F = 0: f = 0.5
    gates[0, 0, :4] = 30.0  # tanh(30) = 1 in float32
    h, _c, _last = qrnn_pooling(gates, pooling="f")
    return h[0, :, 0]


def _decay_level() -> torch.Tensor:
    """One METAGROSS leaf in the c form, ``s_t = (1 - f) s_{t-1} + f z_t`` with ``f = 0.5``,
    ``o = 1``, ``z_0 = 1`` and ``z_t = 0`` after: ``out_t = 0.5 ** (t + 1)``."""
    P = torch.zeros(1, T, 3, 1, 4)
    P[:, :, 1] = 30.0  # o = sigmoid(30) = 1
    P[:, 0, 2] = 30.0  # z_0 = 1
    out, _ = metagross_level(P, None, None, None, None, None, None, False)
    return out[0, :, 0]


@pytest.mark.parametrize("family,run,shift", [
    ("scan", _decay_scan, 0), ("scan", _decay_pooling, 1), ("metagross", _decay_level, 1)])
def test_forward_flushes_subnormal_states(family, run, shift):
    _compiled(family)
    got = run()
    assert got[SUBNORMAL] == 0
    assert got[NORMAL] == float(HALVES[NORMAL + shift])


def test_backward_flushes_a_subnormal_carry():
    _compiled("scan")
    a = torch.full((1, T, 4), 0.5)
    b = torch.zeros(1, T, 4, requires_grad=True)
    linear_scan(a, b)[:, -1].sum().backward()  # the gradient enters at the last step only
    grad = b.grad[0, :, 0]  # d h_{T-1} / d b_t = 0.5 ** (T - 1 - t)
    assert grad[T - 1 - SUBNORMAL] == 0
    assert grad[T - 1 - NORMAL] == float(HALVES[NORMAL])


def test_the_callers_setting_is_left_as_it_was():
    _compiled("scan")
    tiny = torch.tensor([1e-39])  # subnormal
    _decay_scan()
    assert (tiny * 1.0).item() != 0  # this thread still computes with subnormals
    torch.set_flush_denormal(True)
    try:
        _decay_scan()
        assert (tiny * 1.0).item() == 0  # and a thread that flushes still does
    finally:
        torch.set_flush_denormal(False)
