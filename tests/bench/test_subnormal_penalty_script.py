"""benchmarks/subnormal_penalty.py: its cases hold the values they name, and a short run times
each case with flushing off (and on where the CPU flushes), leaving flushing off."""

from __future__ import annotations

import pytest
import torch
from script_modules import BENCHMARKS, script_module

SMALLEST_NORMAL = torch.finfo(torch.float32).tiny


@pytest.fixture(scope="module")
def bench():
    with script_module("subnormal_penalty", BENCHMARKS) as module:
        yield module


def test_the_cases_hold_what_they_name(bench):
    for case, (value, factor) in bench.CASES.items():
        x = torch.tensor(value, dtype=torch.float32)
        product = float(x * factor)
        if case == "normal":
            assert abs(float(x)) >= SMALLEST_NORMAL and abs(product) >= SMALLEST_NORMAL
        else:
            assert 0 < abs(product) < SMALLEST_NORMAL  # a subnormal product, not zero
        if case.startswith("subnormal operands"):
            assert 0 < abs(float(x)) < SMALLEST_NORMAL


def test_a_short_run_times_every_case_and_leaves_flushing_off(bench):
    rows = bench.measure(values=256, calls=2, repeats=1)
    cases = [r["case"] for r in rows if not r["flush"]]
    assert cases == list(bench.CASES)
    assert all(r["us"] > 0 for r in rows) and rows[0]["ratio"] == 1.0
    assert len(rows) in (3, 6)  # with flushing too where the CPU can flush
    tiny = torch.tensor(1e-39, dtype=torch.float32)
    assert float(tiny * 1.0) > 0  # flushing is off again: a subnormal survives an op
