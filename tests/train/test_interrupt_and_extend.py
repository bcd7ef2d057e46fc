"""Ctrl-C in ``ctrlrnn train``: one line (step, checkpoint, the command to resume), exit 130,
and that command continues the run; ``--resume`` with a larger ``--max-steps`` extends a
finished run; every resume says the step it starts from.

Each ``ctrlrnn train`` is a process of its own, forked from one that has imported torch and
ctrlrnn (:mod:`warm_start`: the imports cost far more than these runs)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import warm_start

ARGS = [
    "--task", "copy", "--model", "qrnn", "--epochs", "50", "--no-progress",
    "model.hidden_size=8", "task.train_size=128", "task.valid_size=32", "task.test_size=32",
    "task.digits=3", "batch_size=32", "checkpoint_every=1000", "log_every=1", "eval_every=0",
]


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="module")
def starter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[warm_start.Starter]:
    with warm_start.Starter(warm_start.CTRLRNN_MODULES, _env(),
                            tmp_path_factory.mktemp("commands")) as started:
        yield started


def _train(starter: warm_start.Starter, *args: str, cwd: Path
           ) -> subprocess.CompletedProcess[str]:
    """``python -m ctrlrnn train ARGS``, a process of its own."""
    return starter.run(["-m", "ctrlrnn", "train", *args], cwd=cwd)


def _steps_logged(out: Path) -> int:
    log = out / "log.jsonl"
    if not log.exists():
        return 0
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return max((r.get("step", 0) for r in rows), default=0)


def _final_rows(out: Path) -> list[dict]:
    rows = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines() if line]
    return [r for r in rows if r.get("split") == "final"]


def test_ctrl_c_prints_one_line_and_its_resume_command_works(tmp_path, starter):
    out = tmp_path / "run"
    argv = [*ARGS, "--max-steps", "100000", "--out", str(out)]
    proc = starter.start(["-m", "ctrlrnn", "train", *argv], cwd=tmp_path)
    deadline = time.time() + 300
    while _steps_logged(out) < 5 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    line = lines[0]
    assert line.startswith("ctrlrnn train: interrupted at step ")
    step = int(line.split("interrupted at step ")[1].split(";")[0])
    assert step >= 5
    assert f"checkpoint {out / 'checkpoint.safetensors'}" in line
    # the checkpoint holds exactly the step reported (written at the interrupt)
    from ctrlrnn.train.checkpoint import Checkpoint

    assert Checkpoint(out / "checkpoint.safetensors").progress["step"] == step

    command = shlex.split(line.split("resume with: ")[1])
    assert command[0] == "ctrlrnn" and command[-1] == "--resume"
    # run the printed command (as ``python -m ctrlrnn``), with a reachable limit
    rest = command[1:]
    at = rest.index("--max-steps")
    rest[at + 1] = str(step + 3)
    resumed = _train(starter, *rest[1:], cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resume: resuming {out} from step {step} " in resumed.stderr
    assert _steps_logged(out) == step + 3


def test_interrupt_before_the_first_checkpoint_is_one_line(tmp_path, starter):
    # SIGINT while the task is still being set up: no checkpoint, nothing to resume
    out = tmp_path / "early"
    proc = starter.start(["-m", "ctrlrnn", "train", *ARGS, "--max-steps", "100000", "--out",
                          str(out)], cwd=tmp_path)
    deadline = time.time() + 300  # the run directory appears while the task is set up
    while not out.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.01)
    if proc.poll() is not None:
        pytest.skip("the process ended before the signal")
    proc.send_signal(signal.SIGINT)
    _stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert len([line for line in stderr.splitlines() if line.strip()]) == 1, stderr
    assert stderr.startswith("ctrlrnn")


def test_resume_with_a_larger_max_steps_continues_a_finished_run(tmp_path, starter):
    out = tmp_path / "run"
    first = _train(starter, *ARGS, "--max-steps", "6", "--out", str(out), cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("step 6 (")

    same = _train(starter, *ARGS, "--max-steps", "6", "--out", str(out), "--resume", cwd=tmp_path)
    assert same.returncode == 0, same.stderr
    assert f"resume: {out} finished at step 6; nothing left to train under max_steps 6" \
        in same.stderr

    more = _train(starter, *ARGS, "--max-steps", "10", "--out", str(out), "--resume", cwd=tmp_path)
    assert more.returncode == 0, more.stderr
    assert f"resume: continuing the finished run {out} from step 6 " in more.stderr
    assert more.stdout.startswith("step 10 (")
    assert _steps_logged(out) == 10
    finals = _final_rows(out)
    assert [r["step"] for r in finals] == [10]  # the step-6 result is replaced, not kept


def test_resume_without_a_checkpoint_says_it_starts_at_zero(tmp_path, starter):
    out = tmp_path / "new"
    run = _train(starter, *ARGS, "--max-steps", "2", "--out", str(out), "--resume", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert f"resume: {out} holds no checkpoint yet; starting at step 0" in run.stderr
