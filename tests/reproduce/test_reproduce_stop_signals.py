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


def _children(pid: int) -> list[int]:
    """``pid``'s child processes (Linux's /proc)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text()
        found += [int(p) for p in text.split()]
    return found


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists and has not ended (a zombie has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


@pytest.mark.skipif(not Path(f"/proc/self/task/{os.getpid()}/children").exists(),
                    reason="reads each process's children from /proc (Linux)")
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_a_stopped_parallel_reproduce_leaves_no_worker_training(tmp_path: Path, how: str) -> None:
    """``--jobs 2``: a stop signal to the command reaches its workers (each stops at a step
    boundary with its checkpoint), and a command killed outright takes its workers with it."""
    runs, results, docs = tmp_path / "runs", tmp_path / "results", tmp_path / "docs"
    argv = [sys.executable, "-m", "ctrlrnn", "reproduce", "--quick", "--only", "qrnn-copy",
            "--jobs", "2", "--runs", str(runs), "--results", str(results), "--docs", str(docs),
            "--no-speed", "--no-progress"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 300
        while not list(runs.rglob("log.jsonl")):  # a worker has started training
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "training never started"
            time.sleep(0.05)
        workers = _children(proc.pid)
        assert workers
        proc.send_signal(getattr(signal, how))
        proc.communicate(timeout=120)
        deadline = time.monotonic() + 120
        while any(_running(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [w for w in workers if _running(w)]
    finally:
        if proc.poll() is None:
            proc.kill()
        for w in workers:
            if _running(w):
                os.kill(w, signal.SIGKILL)
    assert not left, f"workers still running after the command ended: {left}"
    if how == "SIGTERM":
        assert proc.returncode == 128 + signal.SIGTERM
