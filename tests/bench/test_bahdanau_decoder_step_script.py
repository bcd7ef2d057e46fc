"""benchmarks/bahdanau_decoder_step.py: a round times both decoder steps, the cell one through
``torch.lstm_cell``, and leaves the decoder's step as it found it."""

from __future__ import annotations

import pytest
from script_modules import BENCHMARKS, script_module

from ctrlrnn.models import seq2seq, torch_rnn_step


@pytest.fixture(scope="module")
def bench():
    with script_module("bahdanau_decoder_step", BENCHMARKS) as module:
        yield module


def test_a_round_times_both_steps(bench, monkeypatch):
    cells = []
    original = torch_rnn_step.lstm_step
    monkeypatch.setattr(bench, "lstm_step", lambda *a: cells.append(1) or original(*a))
    r = bench.run(repeats=1, steps=1)
    assert set(r) == {"module_ms", "cell_ms", "speedup", "steps"} and r["steps"] == 1
    assert r["module_ms"] > 0 and r["cell_ms"] > 0 and r["speedup"] > 0
    assert cells  # the cell path ran through lstm_step
    assert seq2seq.lstm_step is original
