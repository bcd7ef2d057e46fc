"""The compiled kernels' output cache (ops/output_cache.py): freed outputs reused, its limit,
emptying it, one pool shared by the extensions."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import ctrlrnn
from ctrlrnn import linear_scan
from ctrlrnn.ops.backend import cpu_extension

DEFAULT_MB = 512  # CTRLRNN_OUTPUT_CACHE_MB unset


@pytest.fixture
def scan_ext(tuned_runtime):
    """The scan extension, under the tuned runtime (the cache is its own)."""
    ext = cpu_extension("scan")
    assert ext is not None
    return ext


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
                         "extensions", "pools", "huge_pages"}
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


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MADV_HUGEPAGE is Linux only")
def test_large_blocks_are_aligned_for_huge_pages(scan_ext):
    """Blocks of 2 MiB or more start on a 2 MiB boundary (advised MADV_HUGEPAGE), smaller ones
    come from torch's allocator; CTRLRNN_HUGE_PAGES=0 turns the advice off."""
    huge = 2 << 20
    like = torch.empty(0)
    if os.environ.get("CTRLRNN_HUGE_PAGES", "") != "0":
        assert scan_ext.output_cache_huge_pages()
        assert ctrlrnn.output_cache_info()["huge_pages"]
        for numel in (huge // 4, 3 * huge // 4 + 12345, 5 * huge):
            blocks = [scan_ext.pooled_empty([numel], like) for _ in range(3)]
            assert all(b.data_ptr() % huge == 0 for b in blocks), numel
            blocks[0].fill_(1.0)  # writable to the end
            blocks[0][-1] = 2.0
    code = ("import torch; from ctrlrnn.ops.backend import cpu_extension; "
            "print(cpu_extension('scan').output_cache_huge_pages())")
    env = {**os.environ, "CTRLRNN_HUGE_PAGES": "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)  # fmt: skip
    assert out.stdout.strip().splitlines()[-1] == "False"
