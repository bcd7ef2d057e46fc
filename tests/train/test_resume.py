"""A killed training run (SIGKILL mid-way) resumes to the same weights and metrics.

Each ``ctrlrnn train`` is a process of its own, forked from one that has imported torch and
ctrlrnn (:mod:`warm_start`: the imports cost far more than these runs)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import torch
import warm_start
from safetensors.torch import load_file

ARGS = [
    "--task", "copy", "--model", "qrnn", "--max-steps", "40", "--epochs", "10", "--no-progress",
    "model.hidden_size=16", "task.train_size=256", "task.valid_size=64", "task.test_size=64",
    "task.digits=4", "batch_size=32", "checkpoint_every=4", "log_every=1", "eval_every=16",
]


def _cmd(out: Path, *extra: str) -> list[str]:
    return ["-m", "ctrlrnn", "train", *ARGS, "--out", str(out), *extra]


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def _steps_logged(out: Path) -> int:
    log = out / "log.jsonl"
    if not log.exists():
        return 0
    steps = [json.loads(line).get("step", 0) for line in log.read_text().splitlines() if line]
    return max(steps, default=0)


def test_kill_and_resume_matches_uninterrupted(tmp_path):
    with warm_start.Starter(warm_start.CTRLRNN_MODULES, _env(), tmp_path) as starter:
        _kill_and_resume(starter, tmp_path)


def _kill_and_resume(starter: warm_start.Starter, tmp_path: Path) -> None:
    full = tmp_path / "full"
    assert starter.run(_cmd(full), cwd=tmp_path).returncode == 0

    cut = tmp_path / "cut"
    proc = starter.start(_cmd(cut), cwd=tmp_path)
    deadline = time.time() + 300
    while _steps_logged(cut) < 10 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(300) == -signal.SIGKILL
    killed_at = _steps_logged(cut)
    assert 10 <= killed_at < 40
    assert (cut / "checkpoint.safetensors").exists()
    assert not (cut / "result.json").exists()

    # without --resume the existing run is protected
    refused = starter.run(_cmd(cut), cwd=tmp_path, timeout=300)
    assert refused.returncode == 2 and "--resume" in refused.stderr

    resumed = starter.run(_cmd(cut, "--resume"), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr

    a = load_file(str(full / "checkpoint.safetensors"))
    b = load_file(str(cut / "checkpoint.safetensors"))
    model_keys = [k for k in a if k.startswith("model/")]
    assert model_keys and set(a) == set(b)
    for k in model_keys:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0)
    ra = json.loads((full / "result.json").read_text())
    rb = json.loads((cut / "result.json").read_text())
    assert ra["valid"] == rb["valid"] and ra["test"] == rb["test"]
    assert ra["step"] == rb["step"] == 40
    # the log of the resumed run has each training step exactly once
    steps = [json.loads(x)["step"] for x in (cut / "log.jsonl").read_text().splitlines()
             if json.loads(x).get("split") == "train"]
    assert steps == list(range(1, 41))
