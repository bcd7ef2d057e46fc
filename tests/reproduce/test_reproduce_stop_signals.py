"""``ctrlrnn reproduce`` stopped by SIGTERM (a scheduler's stop) ends as Ctrl-C does: the run
under way stops at a step boundary with its checkpoint, one line says how to resume, and the
exit status tells the signal (128 + its number); the same command then finishes the work."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


def test_a_stop_signal_during_training_checkpoints_and_says_how_to_resume(tmp_path: Path) -> None:
    signum = signal.SIGTERM  # Ctrl-C takes the same path (tests/train covers its words)
    runs, results, docs = tmp_path / "runs", tmp_path / "results", tmp_path / "docs"
    argv = [sys.executable, "-m", "ctrlrnn", "reproduce", "--quick", "--only", "qrnn-copy",
            "--runs", str(runs), "--results", str(results), "--docs", str(docs), "--no-speed",
            "--no-progress"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 300
        while not list(runs.rglob("log.jsonl")):  # the first run has started training
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "training never started"
            time.sleep(0.05)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    if proc.returncode == 0:
        pytest.skip("the first run finished before the signal arrived")
    assert proc.returncode == 128 + signum, err
    words = "interrupted" if signum == signal.SIGINT else "interrupted by SIGTERM"
    lines = [ln for ln in err.splitlines() if ln.startswith("ctrlrnn reproduce:")]
    assert len(lines) == 1 and lines[0].startswith(f"ctrlrnn reproduce: {words}; "), err
    assert "Traceback" not in err
    assert list(runs.rglob("checkpoint.safetensors"))
    again = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600,
                           check=False)
    assert again.returncode == 0, again.stderr
    assert (results / "quick" / "qrnn-copy.json").is_file()
