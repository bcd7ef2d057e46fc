"""cached_linear: ``torch.nn.functional.linear`` whose output comes from the compiled kernels'
output cache (ops/cached_linear.py)."""

from __future__ import annotations

import pytest
import torch

from ctrlrnn.ops.backend import cpu_extension
from ctrlrnn.ops.cached_linear import _cached_linear_op, cached_linear


@pytest.fixture
def scan_ext():
    ext = cpu_extension("scan")
    assert ext is not None
    return ext


def test_matches_linear_and_gradchecks():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 5, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(4, 5, dtype=torch.float64, generator=g, requires_grad=True)
    b = torch.randn(4, dtype=torch.float64, generator=g, requires_grad=True)
    torch.testing.assert_close(cached_linear(x, w, b), torch.nn.functional.linear(x, w, b))
    assert torch.autograd.gradcheck(cached_linear, (x, w, b))
    assert torch.autograd.gradcheck(lambda x, w: cached_linear(x, w, None), (x, w))
    torch.library.opcheck(_cached_linear_op, (x, w, b))


def test_output_comes_from_the_cache(scan_ext):
    x = torch.randn(64, 128, 64)
    w = torch.randn(256, 64)  # output (64, 128, 256) fp32 = 8 MiB
    first = cached_linear(x, w)
    expected = first.clone()
    del first
    _held, _limit, _fresh, reused0 = scan_ext.output_cache_stats()
    second = cached_linear(x, w)
    assert scan_ext.output_cache_stats()[3] == reused0 + 1
    torch.testing.assert_close(second, expected, rtol=0, atol=0)
