"""One writer per run directory, resume means the same run, logs that a kill cannot lose."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ctrlrnn.train import logs
from ctrlrnn.train.logs import RunLog
from ctrlrnn.train.run_lock import RunLock, RunLocked
from ctrlrnn.train.trainer import config_differences

ARGS = [
    "--task", "copy", "--model", "qrnn", "--epochs", "50", "--no-progress",
    "model.hidden_size=8", "task.train_size=128", "task.valid_size=32", "task.test_size=32",
    "task.digits=3", "batch_size=32", "checkpoint_every=2", "log_every=1", "eval_every=0",
]


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def _train(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ctrlrnn", "train", *ARGS, "--out", str(out),
                           *extra], env=_env(), capture_output=True, text=True, timeout=600)


def _train_here(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """``ctrlrnn train`` in this process (no interpreter start-up), stderr captured."""
    import contextlib
    import io

    from ctrlrnn import cli

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(["train", *ARGS, "--out", str(out), *extra])
    return subprocess.CompletedProcess([], code, "", err.getvalue())


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


# ---------------------------------------------------------------- the lock
def test_second_holder_is_refused_naming_the_first(tmp_path):
    with RunLock(tmp_path / "run"):
        with pytest.raises(RunLocked, match=rf"in use by another run \(PID {os.getpid()} on "):
            RunLock(tmp_path / "run").acquire()
    with RunLock(tmp_path / "run", quiet=True):  # released: free again
        pass


def test_lock_of_a_killed_process_is_taken_over(tmp_path, capsys):
    run = tmp_path / "run"
    code = ("import sys, time; from ctrlrnn.train.run_lock import RunLock; "
            f"RunLock({str(run)!r}).acquire(); print('held', flush=True); time.sleep(600)")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(RunLocked, match=rf"PID {holder.pid} "):
        RunLock(run).acquire()
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    with RunLock(run):
        pass
    err = capsys.readouterr().err
    assert f"was left by PID {holder.pid}" in err and "taken over" in err


def test_two_trainings_into_one_directory(tmp_path):
    out = tmp_path / "run"
    # a first run that cannot finish on its own (ARGS' 50 epochs take under a second on a fast
    # machine, which let it end before the second run started)
    first = subprocess.Popen([sys.executable, "-m", "ctrlrnn", "train", *ARGS, "--epochs",
                              "1000000", "--max-steps", "100000000", "--out", str(out)], env=_env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 300
        while not (out / "log.jsonl").exists() and time.time() < deadline:
            time.sleep(0.05)
        second = _train(out, "--max-steps", "3", "--resume")
        assert second.returncode == 2
        line = _one_line(second.stderr)
        assert line.startswith(f"ctrlrnn train: out: {out} is in use by another run (PID "
                               f"{first.pid} on ")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    rows = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines() if x.strip()]
    steps = [r["step"] for r in rows if r.get("split") == "train"]
    assert steps == list(range(1, len(steps) + 1))  # one writer: no rows of another run


def test_unwritable_out_is_one_line(tmp_path):
    if os.geteuid() == 0:
        target = Path("/proc/ctrlrnn-cannot-write-here")  # even root cannot create this
    else:
        locked = tmp_path / "ro"
        locked.mkdir()
        locked.chmod(0o500)
        target = locked / "run"
    run = _train_here(target, "--max-steps", "2")
    assert run.returncode == 2
    assert _one_line(run.stderr).startswith(f"ctrlrnn train: out: cannot write to {target}: ")


# ---------------------------------------------------------------- resume = the same run
def test_config_differences_ignore_limits_and_accepted_keys():
    stored = {"lr": 0.001, "max_steps": 10, "out": "a", "seed": 0,
              "model_args": {"hidden_size": 8}, "task_args": {"digits": 3}}
    asked = {"lr": 0.01, "max_steps": 20, "out": "b", "seed": 1,
             "model_args": {"hidden_size": 16}, "task_args": {"digits": 3}}
    assert config_differences(stored, asked) == {
        "lr": (0.001, 0.01), "seed": (0, 1), "model.hidden_size": (8, 16)}
    assert config_differences(stored, asked, frozenset({"lr", "seed"})) == {
        "model.hidden_size": (8, 16)}


def test_a_qrnn_run_stored_before_causal_existed_was_causal():
    """``model.causal`` (added later) is implied True for a stored QRNN run that lacks it, and
    not asked of runs whose encoder has no such option."""
    qrnn = {"lr": 0.001, "model_args": {"hidden_size": 8, "window": 2}, "task_args": {}}
    assert config_differences(qrnn, {**qrnn, "model_args": {
        "hidden_size": 8, "window": 2, "causal": True}}) == {}
    assert config_differences(qrnn, {**qrnn, "model_args": {
        "hidden_size": 8, "window": 2, "causal": False}}) == {"model.causal": (True, False)}
    assert config_differences(qrnn, {**qrnn, "model_args": {
        "hidden_size": 8, "window": [6, 2], "causal": True}}) == {"model.window": (2, [6, 2])}
    lstm = {"lr": 0.001, "model_args": {"hidden_size": 8}, "task_args": {}}
    assert config_differences(lstm, dict(lstm)) == {}


def test_resume_with_another_configuration(tmp_path):
    out = tmp_path / "run"
    assert _train_here(out, "--max-steps", "4").returncode == 0
    refused = _train_here(out, "--max-steps", "8", "--resume", "lr=0.01", "seed=3")
    assert refused.returncode == 2
    line = _one_line(refused.stderr)
    assert "was started with another configuration (seed 0 -> 3, lr 0.003 -> 0.01)" in line
    assert "add --override seed=3 --override lr=0.01, or train into a new --out" in line
    stored = json.loads((out / "result.json").read_text())
    assert stored["step"] == 4  # nothing ran

    accepted = _train_here(out, "--max-steps", "6", "--resume", "--override", "lr=0.01")
    assert accepted.returncode == 0, accepted.stderr
    assert "continuing the finished run" in accepted.stderr
    again = _train_here(out, "--max-steps", "6", "--resume", "lr=0.01")  # now the stored value
    assert again.returncode == 0, again.stderr

    shape = _train_here(out, "--max-steps", "8", "--resume", "lr=0.01", "--override",
                   "model.hidden_size=16")
    assert shape.returncode == 2
    assert "does not fit this model or optimizer" in _one_line(shape.stderr)


# ---------------------------------------------------------------- logs
def test_truncation_is_atomic(tmp_path, monkeypatch):
    log = RunLog(tmp_path)
    for step in range(1, 11):
        log.write({"step": step, "split": "train", "loss": 1.0 / step})
    before = (tmp_path / "log.jsonl").read_bytes()

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # as if the process died right before the rename

    monkeypatch.setattr(logs.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        log.truncate_after(4)
    assert (tmp_path / "log.jsonl").read_bytes() == before  # the old log, whole
    assert not list(tmp_path.glob(".log.jsonl.*.tmp"))
    monkeypatch.undo()
    log.truncate_after(4)
    assert [r["step"] for r in log.rows()] == [1, 2, 3, 4]
    assert (tmp_path / "log.csv").read_text().count("\n") == 5


def test_a_row_cut_by_a_kill_is_skipped(tmp_path):
    log = RunLog(tmp_path)
    log.write({"step": 1, "split": "train"})
    with open(tmp_path / "log.jsonl", "a") as fh:
        fh.write('{"step": 2, "spl')
    assert [r["step"] for r in log.rows()] == [1]
    log.truncate_after(1)
    assert (tmp_path / "log.jsonl").read_text() == '{"step": 1, "split": "train"}\n'


# ---------------------------------------------------------------- corrupt checkpoints
def _flip_a_tensor_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    header = int.from_bytes(data[:8], "little")
    data[8 + header + 16] ^= 0x01  # one bit of the first tensor's bytes
    path.write_bytes(bytes(data))


def test_corrupt_checkpoint_is_named_resume_falls_back_and_litter_goes(tmp_path):
    out = tmp_path / "run"
    assert _train_here(out, "--max-steps", "4").returncode == 0
    latest = out / "checkpoint.safetensors"
    assert (out / "checkpoint.previous.safetensors").is_file()
    _flip_a_tensor_byte(latest)

    evaluated = subprocess.run([sys.executable, "-m", "ctrlrnn", "eval", "--checkpoint",
                                str(latest)], env=_env(), capture_output=True, text=True,
                               timeout=300)
    assert evaluated.returncode == 2
    line = _one_line(evaluated.stderr)
    assert line.startswith(f"ctrlrnn eval: checkpoint: {latest}: tensor ")
    assert "does not match its checksum" in line

    gone = subprocess.Popen([sys.executable, "-c", "pass"])  # a writer that is gone
    gone.wait()
    stale = out / f".checkpoint.safetensors.{gone.pid}.abc123.tmp"
    stale.write_bytes(b"")
    live = out / f".checkpoint.safetensors.{os.getpid()}.abc123.tmp"  # a live writer's
    live.write_bytes(b"x")

    resumed = _train_here(out, "--max-steps", "6", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert not stale.exists() and live.exists()
    assert "removed 1 temporary file(s)" in resumed.stderr
    assert f"resume: checkpoint: {latest}: tensor " in resumed.stderr
    assert f"using {out / 'checkpoint.previous.safetensors'} (step 4) instead" in resumed.stderr
    assert json.loads((out / "result.json").read_text())["step"] == 6

    for name in ("checkpoint.safetensors", "checkpoint.previous.safetensors"):
        (out / name).write_bytes(b"")  # both gone bad: a clear line, no traceback
    broken = _train_here(out, "--max-steps", "8", "--resume")
    assert broken.returncode == 2
    line = _one_line(broken.stderr)
    assert "empty file" in line and "no intact checkpoint left" in line
