"""benchmarks/full_length_lstm.py: a point times torch's layer and the fused cells, each on its
own path, and reports which one the rule takes there."""

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
    with script_module("full_length_lstm", BENCHMARKS) as module:
        yield module


@pytest.mark.parametrize("point,rule", [((2, 3, 128, 64, 128), "fused"), ((1, 3, 4, 2, 6), "torch"),
                                        ((1, 1, 128, 16, 512), "fused")])
def test_a_point_times_both_paths(bench, monkeypatch, point, rule):
    fused_calls = []
    monkeypatch.setattr(torch_rnn_lengths, "_fused", lambda *a: fused_calls.append(1)
                        or ORIGINAL_FUSED(*a))
    row = bench.run_point(point, repeats=2)
    assert row["torch_ms"] > 0 and row["fused_ms"] > 0 and row["speedup"] > 0
    assert row["rule"] == rule
    assert len(fused_calls) == 1 + 2  # the warm-up and one call a round, whatever the rule


def test_the_grid_holds_the_experiments_shapes(bench):
    assert (1, 1, 128, 64, 784) in bench.GRID and (2, 64, 128, 16, 170) in bench.GRID


def test_a_point_runs_alone_in_its_own_process(bench):
    row = bench.run_point_alone((1, 3, 4, 2, 6), repeats=1, threads=1)
    assert row["rule"] == "torch" and row["steps"] == 6 and row["speedup"] > 0


@pytest.mark.parametrize("text", ["1,2,3", "1,2,3,4,0", "a,b,c,d,e"])
def test_a_malformed_point_is_refused_by_name(bench, text):
    with pytest.raises(Exception, match="point"):
        bench._point(text)


def test_a_failing_point_process_reports_its_error(bench):
    with pytest.raises(RuntimeError, match="point"):
        bench.run_point_alone((1, 3, 4, 2, 0), repeats=1, threads=1)  # --point refuses 0 steps
