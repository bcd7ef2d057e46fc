"""benchmarks/variable_length_encoders.py: each case times both paths and the fused path is
the one its name says (the packed run is restored after every round)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from ctrlrnn.models import torch_rnn_lengths
from ctrlrnn.ops import backend

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "variable_length_encoders.py"


ORIGINAL_FUSED = torch_rnn_lengths._fused

pytestmark = pytest.mark.skipif(not backend.has_kernel("cells", torch.device("cpu")),
                                reason="the fused path needs the compiled cells")


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("variable_length_encoders", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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

