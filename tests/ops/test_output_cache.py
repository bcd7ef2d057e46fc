"""The compiled kernels' output cache and the scan's streaming-store path."""

from __future__ import annotations

import pytest
import torch

import ctrlrnn
from ctrlrnn import linear_scan, linear_scan_ref
from ctrlrnn.ops.backend import cpu_extension

DEFAULT_MB = 512  # CTRLRNN_OUTPUT_CACHE_MB unset


@pytest.fixture
def scan_ext():
    ext = cpu_extension("scan")
    assert ext is not None
    return ext


@pytest.fixture
def streaming_everywhere(scan_ext):
    """Every scan call streams its outputs, however small."""
    before = scan_ext.streaming_threshold()
    scan_ext.set_streaming_threshold(0)
    yield
    scan_ext.set_streaming_threshold(before)


# channel counts that leave unaligned heads and tails around the 8-wide vector loop
@pytest.mark.parametrize("C", [1, 7, 8, 13, 64])
@pytest.mark.parametrize("reverse", [False, True])
def test_streaming_path_matches_reference(streaming_everywhere, C, reverse):
    g = torch.Generator().manual_seed(C)
    a = torch.rand(3, 9, C, generator=g, requires_grad=True)
    b = torch.randn(3, 9, C, generator=g, requires_grad=True)
    h0 = torch.randn(3, C, generator=g, requires_grad=True)
    lengths = torch.tensor([9, 4, 1])
    gy = torch.randn(3, 9, C, generator=g)
    out = linear_scan(a, b, h0, reverse=reverse, lengths=lengths)
    grads = torch.autograd.grad(out, (a, b, h0), gy)
    ref = linear_scan_ref(a, b, h0, reverse=reverse, lengths=lengths)
    ref_grads = torch.autograd.grad(ref, (a, b, h0), gy)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_large_outputs_reuse_freed_blocks(scan_ext):
    # (4, 256, 512) fp32 = 2 MiB per output: above the 1 MiB the cache starts at
    a = torch.rand(4, 256, 512)
    b = torch.randn(4, 256, 512)
    first = linear_scan(a, b)
    expected = first.clone()
    del first
    _held, _limit, fresh0, reused0 = scan_ext.output_cache_stats()
    second = linear_scan(a, b)
    _held, _limit, fresh1, reused1 = scan_ext.output_cache_stats()
    assert reused1 == reused0 + 1 and fresh1 == fresh0
    torch.testing.assert_close(second, expected, rtol=0, atol=0)
    # a live output is never handed out again
    third = linear_scan(a, 2 * b)
    assert third.data_ptr() != second.data_ptr()
    torch.testing.assert_close(second, expected, rtol=0, atol=0)


def test_empty_cache_and_limit(scan_ext):
    a = torch.rand(4, 256, 512)
    out = linear_scan(a, a)
    del out
    info = ctrlrnn.output_cache_info()
    assert "scan" in info["extensions"]
    assert info["limit_bytes"] == info["pools"] * (DEFAULT_MB << 20)
    assert info["held_bytes"] >= 4 * 256 * 512 * 4
    assert ctrlrnn.empty_cache() >= 4 * 256 * 512 * 4
    assert ctrlrnn.output_cache_info()["held_bytes"] == 0
    try:
        ctrlrnn.set_output_cache_limit(0)  # disabled: freed outputs go back to the system
        out = linear_scan(a, a)
        del out
        assert ctrlrnn.output_cache_info()["held_bytes"] == 0
    finally:
        ctrlrnn.set_output_cache_limit(DEFAULT_MB)


def test_cache_limit_evicts_oldest(scan_ext):
    ctrlrnn.empty_cache()
    try:
        ctrlrnn.set_output_cache_limit(3)  # 3 MiB: room for one 2 MiB block only
        x = torch.rand(4, 256, 512)
        y = torch.rand(4, 128, 512)  # 1 MiB block
        out1, out2 = linear_scan(x, x), linear_scan(y, y)
        del out1
        del out2
        held = ctrlrnn.output_cache_info()["held_bytes"]
        assert 0 < held <= 3 << 20
    finally:
        ctrlrnn.set_output_cache_limit(DEFAULT_MB)


def test_one_pool_shared_and_reported_once(scan_ext):
    exts = {name: cpu_extension(name) for name in ("scan", "cells", "metagross")}
    assert all(ext is not None for ext in exts.values())
    info = ctrlrnn.output_cache_info()
    assert info["extensions"] == ["cells", "metagross", "scan"]
    assert set(info) == {"held_bytes", "limit_bytes", "fresh_allocations", "reuses",
                         "extensions", "pools"}
    try:
        exts["scan"].output_cache_set_limit(5 << 20)  # through one extension only
        limits = {name: ext.output_cache_stats()[1] for name, ext in exts.items()}
    finally:
        ctrlrnn.set_output_cache_limit(DEFAULT_MB)
    shared = all(limit == 5 << 20 for limit in limits.values())
    # what output_cache_info() reports agrees with what the libraries do
    assert info["pools"] == (1 if shared else 3)
    if shared:  # the usual build (GCC): one pool, one limit, counted once
        assert info["limit_bytes"] == DEFAULT_MB << 20
        held, limit, fresh, reused = exts["cells"].output_cache_stats()
        now = ctrlrnn.output_cache_info()
        assert (now["held_bytes"], now["limit_bytes"]) == (held, limit)
        assert (now["fresh_allocations"], now["reuses"]) == (fresh, reused)


@pytest.mark.parametrize("value", [-1, 1.5, True, "8"])
def test_bad_cache_limit(value):
    with pytest.raises(ValueError, match="megabytes"):
        ctrlrnn.set_output_cache_limit(value)


def test_cached_linear_matches_linear_and_gradchecks():
    from ctrlrnn.ops.cached_linear import _cached_linear_op, cached_linear

    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 5, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(4, 5, dtype=torch.float64, generator=g, requires_grad=True)
    b = torch.randn(4, dtype=torch.float64, generator=g, requires_grad=True)
    torch.testing.assert_close(cached_linear(x, w, b), torch.nn.functional.linear(x, w, b))
    assert torch.autograd.gradcheck(cached_linear, (x, w, b))
    assert torch.autograd.gradcheck(lambda x, w: cached_linear(x, w, None), (x, w))
    torch.library.opcheck(_cached_linear_op, (x, w, b))


def test_cached_linear_output_comes_from_the_cache(scan_ext):
    from ctrlrnn.ops.cached_linear import cached_linear

    x = torch.randn(64, 128, 64)
    w = torch.randn(256, 64)  # output (64, 128, 256) fp32 = 8 MiB
    first = cached_linear(x, w)
    expected = first.clone()
    del first
    _held, _limit, _fresh, reused0 = scan_ext.output_cache_stats()
    second = cached_linear(x, w)
    assert scan_ext.output_cache_stats()[3] == reused0 + 1
    torch.testing.assert_close(second, expected, rtol=0, atol=0)
