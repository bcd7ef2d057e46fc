"""benchmarks/decode_speed.py: two source trees decode the same model in worker processes of
their own, each decoder and batch the options name, and the driver compares their tokens."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from script_modules import BENCHMARKS

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _run(*args: str) -> dict:
    done = subprocess.run([sys.executable, str(BENCHMARKS / "decode_speed.py"), SRC, SRC,
                           "--hidden", "8", "--vocab", "20", "--length", "5", "--repeats", "1",
                           "--calls", "1", *args],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("decoder", ["qrnn", "lstm"])
def test_beam_search_of_a_batch_in_two_trees(decoder):
    row = _run("--what", "beam", "--decoder", decoder, "--batch", "3", "--beam", "2")
    assert row["decoder"] == decoder and row["batch"] == 3
    assert row["same_tokens"] is True and row["tokens"] <= 2 * 5 + 10  # the task's limit
    assert row["before_us"] > 0 and row["after_us"] > 0 and row["speedup"] > 0


def test_greedy_at_batch_one_is_the_default():
    row = _run()
    assert row["what"] == "greedy" and row["decoder"] == "qrnn" and row["batch"] == 1
    assert row["same_tokens"] is True
