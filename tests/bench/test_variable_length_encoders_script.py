"""benchmarks/variable_length_encoders.py: a case times both paths, the fused one through the
fused cells, and leaves the encoders' choice of path as it found it."""

from __future__ import annotations

import pytest
import torch
from script_modules import BENCHMARKS, script_module

from ctrlrnn.models import torch_rnn_lengths
from ctrlrnn.ops import backend

ORIGINAL_FUSED = torch_rnn_lengths._fused

pytestmark = pytest.mark.skipif(not backend.has_kernel("cells", torch.device("cpu")),
                                reason="the fused path needs the compiled cells")


@pytest.fixture(scope="module")
def bench():
    with script_module("variable_length_encoders", BENCHMARKS) as module:
        yield module


@pytest.mark.parametrize("unit", ["lstm", "gru"])
def test_a_case_times_both_paths(bench, unit, monkeypatch):
    original = torch_rnn_lengths.fused_path
    fused_calls = []
    monkeypatch.setattr(torch_rnn_lengths, "_fused", lambda *a: fused_calls.append(1)
                        or ORIGINAL_FUSED(*a))
    row = bench.run_case(("tiny", unit, 3, 6, 4, 5, 2, True), repeats=2)
    assert set(row) == {"case", "packed_ms", "fused_ms", "speedup"}
    assert row["packed_ms"] > 0 and row["fused_ms"] > 0 and row["speedup"] > 0
    assert torch_rnn_lengths.fused_path is original
    assert len(fused_calls) == 1 + 1 + 2  # the check, the warm-up and one call a round

