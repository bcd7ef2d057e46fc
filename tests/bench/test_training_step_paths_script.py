"""benchmarks/training_step_paths.py: each case times both paths, the new one through the
code the models run, and leaves the models' code as it found it."""

from __future__ import annotations

import pytest
from script_modules import BENCHMARKS, script_module

from ctrlrnn.models import seq2seq, torch_rnn_step
from ctrlrnn.nn import position_encoder


@pytest.fixture(scope="module")
def bench():
    with script_module("training_step_paths", BENCHMARKS) as module:
        yield module


def test_the_decoder_case_times_both_steps(bench, monkeypatch):
    cells = []
    original = torch_rnn_step.lstm_step
    monkeypatch.setattr(bench, "lstm_step", lambda *a: cells.append(1) or original(*a))
    r = bench.run("bahdanau-step", "BiLSTM", repeats=1, steps=1)
    assert r["old_ms"] > 0 and r["new_ms"] > 0 and r["speedup"] > 0 and r["steps"] == 1
    assert cells  # the new path ran through lstm_step
    assert seq2seq.lstm_step is original


def test_the_position_encoder_case_times_both_forms(bench, monkeypatch):
    forward = position_encoder.PositionEncoder.forward
    written = []
    original = bench._written_out
    monkeypatch.setattr(bench, "_written_out", lambda *a, **k: written.append(1)
                        or original(*a, **k))
    r = bench.run("position-encoder", "nCARNN", repeats=1, steps=1)
    assert r["old_ms"] > 0 and r["new_ms"] > 0 and r["speedup"] > 0
    assert written  # the old path ran with the weights written out
    assert position_encoder.PositionEncoder.forward is forward


def test_the_rcrn_case_times_both_rules(bench):
    from ctrlrnn.nn import rcrn

    rule = rcrn.fused_controllers_faster
    with bench._rcrn_rule(False):
        assert not rcrn.fused_controllers_faster(200, 32, True, 1, varied_lengths=True)
    with bench._rcrn_rule(True):
        assert rcrn.fused_controllers_faster(200, 32, True, 1, varied_lengths=True)
    assert rcrn.fused_controllers_faster is rule
    r = bench.run("rcrn-controllers-sst5", "RCRN", repeats=1, steps=1)
    assert r["old_ms"] > 0 and r["new_ms"] > 0 and r["speedup"] > 0


def test_the_full_length_case_times_both_paths(bench, monkeypatch):
    import torch

    from ctrlrnn.models import torch_rnn_lengths
    from ctrlrnn.ops import backend

    if not backend.has_kernel("cells", torch.device("cpu")):
        pytest.skip("the fused path needs the compiled cells")

    rule = torch_rnn_lengths.fused_training_faster
    fused = []
    original = torch_rnn_lengths._fused
    monkeypatch.setattr(torch_rnn_lengths, "_fused",  # lengths None: a full-length call
                        lambda *a: (a[2] is None and fused.append(1)) or original(*a))
    with bench._full_length(False):
        assert torch_rnn_lengths.fused_training_faster is not rule
    assert torch_rnn_lengths.fused_training_faster is rule
    # the cases' data need preparing: the same path on the addition task's two-layer LSTM,
    # every shape counted as enough work for the rule
    monkeypatch.setattr(torch_rnn_lengths, "FUSED_TRAINING_WORK", 1)
    monkeypatch.setitem(bench.CASES, "addition", ("qrnn-addition", ("LSTM",), bench._full_length))
    r = bench.run("addition", "LSTM", repeats=1, steps=1)
    assert r["old_ms"] > 0 and r["new_ms"] > 0 and r["speedup"] > 0
    assert fused  # the new path trained the two-layer LSTM on the fused cells
