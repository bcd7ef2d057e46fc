"""Faults of a deployment (issue 69): the signals that schedulers and container runtimes send,
training data smaller than a batch, a batch that torchrun's processes cannot split, options
too large for memory, a checkpoint that does not fit its model, resume advice that could not
be followed.

The signal tests run ``ctrlrnn train`` as a process through a small wrapper that sends the
signal to itself at a chosen call (a step, an evaluation, a checkpoint write, the task's
set-up): the point is exact, and the signal reaches the process as ``kill`` delivers it. Those
processes (and torchrun's agent) are forked from one that has imported torch and ctrlrnn
(:mod:`warm_start`: the imports cost far more than the runs); torchrun's workers are fresh
interpreters.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import signal
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import warm_start

from ctrlrnn import cli
from ctrlrnn.train.checkpoint import Checkpoint, save_checkpoint

ARGS = [
    "--task", "copy", "--model", "qrnn", "--epochs", "50", "--no-progress",
    "model.hidden_size=8", "task.train_size=128", "task.valid_size=32", "task.test_size=32",
    "task.digits=3", "batch_size=32", "log_every=1", "eval_every=0",
]

#: ``python WRAPPER train ...``: ``ctrlrnn`` (its signal handlers installed as on the command
#: line) that sends itself the signals ``$SIGNALS`` (``TERM,TERM``) at call ``$SIGNAL_CALL``
#: of ``$SIGNAL_AT`` (step, evaluate, save, setup), in the process of rank ``$SIGNAL_RANK``
#: only when that is set
WRAPPER = textwrap.dedent("""
    import os, signal, sys

    from ctrlrnn.cli import main
    import ctrlrnn.train.checkpoint as checkpoint
    import ctrlrnn.train.trainer as trainer
    from ctrlrnn.tasks.seq2seq_tasks import Seq2SeqTask

    where, call = os.environ["SIGNAL_AT"], int(os.environ["SIGNAL_CALL"])
    names = os.environ["SIGNALS"].split(",")
    rank = os.environ.get("SIGNAL_RANK")

    def patch(owner, attr):
        real = getattr(owner, attr)
        calls = [0]

        def wrapped(*args, **kwargs):
            calls[0] += 1
            if calls[0] == call and (rank is None or os.environ.get("RANK", "0") == rank):
                for name in names:
                    os.kill(os.getpid(), getattr(signal, "SIG" + name))
            return real(*args, **kwargs)

        setattr(owner, attr, wrapped)

    owner, attr = {"step": (trainer, "training_step"), "evaluate": (Seq2SeqTask, "evaluate"),
                   "save": (checkpoint, "save_file"), "setup": (Seq2SeqTask, "setup")}[where]
    patch(owner, attr)
    sys.argv[0] = "ctrlrnn"
    sys.exit(main())
""")


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
            "CTRLRNN_DIST_TIMEOUT": "60", **extra}


@pytest.fixture(scope="module")
def starter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[warm_start.Starter]:
    with warm_start.Starter((*warm_start.CTRLRNN_MODULES, "torch.distributed.run"), _env(),
                            tmp_path_factory.mktemp("commands")) as started:
        yield started


def _train(starter: warm_start.Starter, *args: str, cwd: Path
           ) -> subprocess.CompletedProcess[str]:
    """``python -m ctrlrnn train ARGS``, a process of its own."""
    return starter.run(["-m", "ctrlrnn", "train", *args], cwd=cwd)


def _signalled(starter: warm_start.Starter, tmp_path: Path, where: str, call: int,
               signals: str, *args: str) -> subprocess.CompletedProcess[str]:
    wrapper = tmp_path / "signalled_ctrlrnn.py"
    wrapper.write_text(WRAPPER)
    return starter.run([str(wrapper), "train", *args], cwd=tmp_path,
                       env={"SIGNAL_AT": where, "SIGNAL_CALL": str(call), "SIGNALS": signals})


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def _rows(out: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines() if x.strip()]


def _history(out: Path) -> list[tuple[Any, ...]]:
    """Every row of the log less its timings: what an interrupted and resumed run must
    reproduce."""
    return [tuple(sorted((k, v) for k, v in r.items() if k != "seconds")) for r in _rows(out)]


def _lock_holder(out: Path) -> str:
    """What the run directory's lock file says (empty once its holder released it)."""
    return (out / ".lock").read_text()


def _resume_from(line: str) -> list[str]:
    """The ``train ...`` arguments of the resume command a line names."""
    command = shlex.split(line.split("resume with: ")[1])
    assert command[0] == "ctrlrnn" and command[1] == "train" and command[-1] == "--resume"
    return command[2:]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, starter: warm_start.Starter) -> Path:
    """An uninterrupted run of 8 steps (an epoch is 4), checkpoints every 2 steps."""
    out = tmp_path_factory.mktemp("reference") / "run"
    run = _train(starter, *ARGS, "checkpoint_every=2", "--max-steps", "8", "--out", str(out),
                 cwd=out.parent)
    assert run.returncode == 0, run.stderr
    return out


# ---------------------------------------------------------------- SIGTERM and SIGHUP
@pytest.mark.parametrize("name", ["TERM", "HUP"])
def test_a_signal_from_outside_stops_the_run_as_ctrl_c_does(tmp_path, starter, name):
    """``kill -TERM`` (``-HUP``) on ``ctrlrnn train``: the step under way finishes, the
    checkpoint holds it, the lock is released, one line names the command that resumes it,
    and the exit status is 128 + the signal's number."""
    signum = getattr(signal, f"SIG{name}")
    out = tmp_path / "run"
    argv = [*ARGS, "checkpoint_every=1000", "--max-steps", "100000", "--out", str(out)]
    proc = starter.start(["-m", "ctrlrnn", "train", *argv], cwd=tmp_path)
    try:
        deadline = time.time() + 300
        while (not (out / "log.jsonl").exists() or len(_rows(out)) < 3) and (
                time.time() < deadline and proc.poll() is None):
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before it could be signalled"
        assert json.loads(_lock_holder(out))["pid"] == proc.pid
        proc.send_signal(signum)
        _stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signum, stderr
    line = _one_line(stderr)
    assert line.startswith(f"ctrlrnn train: interrupted by SIG{name} at step "), line
    step = int(line.split(" at step ")[1].split(";")[0])
    assert step >= 3
    assert f"checkpoint {out / 'checkpoint.safetensors'}; resume with: " in line
    assert Checkpoint(out / "checkpoint.safetensors").progress["step"] == step
    assert _lock_holder(out) == ""  # released: names no process
    rest = _resume_from(line)
    rest[rest.index("--max-steps") + 1] = str(step + 2)
    resumed = _train(starter, *rest, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resume: resuming {out} from step {step} " in resumed.stderr
    assert "taken over" not in resumed.stderr


def test_a_signal_during_a_step_stops_after_that_step_and_loses_nothing(tmp_path, starter,
                                                                        reference):
    out = tmp_path / "run"
    args = [*ARGS, "checkpoint_every=2", "--max-steps", "8", "--out", str(out)]
    run = _signalled(starter, tmp_path, "step", 3, "TERM", *args)
    assert run.returncode == 143, run.stderr
    line = _one_line(run.stderr)
    assert line.startswith("ctrlrnn train: interrupted by SIGTERM at step 3; checkpoint ")
    assert Checkpoint(out / "checkpoint.safetensors").progress["step"] == 3
    assert _lock_holder(out) == ""
    resumed = _train(starter, *_resume_from(line), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert _history(out) == _history(reference)


def test_a_signal_during_a_checkpoint_write_lets_it_finish(tmp_path, starter, reference):
    """The checkpoint being written when SIGTERM comes is finished, whole, and is the one the
    run stops at: never a half-written file, no temporary left."""
    out = tmp_path / "run"
    args = [*ARGS, "checkpoint_every=2", "--max-steps", "8", "--out", str(out)]
    run = _signalled(starter, tmp_path, "save", 2, "TERM", *args)  # the write of step 4
    assert run.returncode == 143, run.stderr
    line = _one_line(run.stderr)
    assert line.startswith("ctrlrnn train: interrupted by SIGTERM at step 4; checkpoint ")
    ckpt = Checkpoint(out / "checkpoint.safetensors")  # loads and verifies its checksums
    assert ckpt.verified and ckpt.progress["step"] == 4
    assert not list(out.glob(".*.tmp"))
    resumed = _train(starter, *_resume_from(line), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert _history(out) == _history(reference)


def test_a_second_signal_stops_at_once_and_keeps_the_last_checkpoint(tmp_path, starter, reference):
    """A second SIGTERM while the first is honoured (here: during the checkpoint write) stops
    at once: the write is abandoned, its temporary removed, the previous checkpoint kept, the
    lock released, one line."""
    out = tmp_path / "run"
    args = [*ARGS, "checkpoint_every=2", "--max-steps", "8", "--out", str(out)]
    run = _signalled(starter, tmp_path, "save", 2, "TERM,TERM", *args)
    assert run.returncode == 143, run.stderr
    line = _one_line(run.stderr)
    assert line.startswith(f"ctrlrnn train: interrupted by SIGTERM; the last checkpoint is "
                           f"{out / 'checkpoint.safetensors'} (step 2); resume with: "), line
    assert Checkpoint(out / "checkpoint.safetensors").progress["step"] == 2
    assert not list(out.glob(".*.tmp"))
    assert _lock_holder(out) == ""
    resumed = _train(starter, *_resume_from(line), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert _history(out) == _history(reference)


def test_a_signal_during_an_evaluation_stops_after_it(tmp_path, starter, reference):
    """SIGTERM during the evaluation at the end of epoch 1 (step 4): the evaluation ends, the
    checkpoint holds step 4 with that evaluation, and the resumed run is the uninterrupted
    one."""
    out = tmp_path / "run"
    args = [*ARGS, "checkpoint_every=2", "--max-steps", "8", "--out", str(out)]
    run = _signalled(starter, tmp_path, "evaluate", 1, "TERM", *args)
    assert run.returncode == 143, run.stderr
    line = _one_line(run.stderr)
    assert line.startswith("ctrlrnn train: interrupted by SIGTERM at step 4; checkpoint ")
    assert [r["step"] for r in _rows(out) if r["split"] == "valid"] == [4]
    resumed = _train(starter, *_resume_from(line), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert _history(out) == _history(reference)


def test_a_signal_during_the_final_evaluation_is_resumed_to_the_end(tmp_path, starter, reference):
    """SIGTERM while the best checkpoint is evaluated on the validation split at the end:
    the run stops with its last checkpoint written; resuming it makes the final evaluation,
    its log row and the report."""
    out = tmp_path / "run"
    args = [*ARGS, "checkpoint_every=2", "--max-steps", "8", "--out", str(out)]
    # after the evaluations of steps 4 and 8
    run = _signalled(starter, tmp_path, "evaluate", 3, "TERM", *args)
    assert run.returncode == 143, run.stderr
    line = _one_line(run.stderr)
    assert line.startswith("ctrlrnn train: interrupted by SIGTERM at step 8; checkpoint ")
    assert not (out / "result.json").exists()
    resumed = _train(starter, *_resume_from(line), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resume: {out} finished at step 8" in resumed.stderr
    assert _history(out) == _history(reference)
    assert json.loads((out / "result.json").read_text())["test"] == json.loads(
        (reference / "result.json").read_text())["test"]


def test_a_signal_during_the_test_evaluation_stops_the_command(tmp_path, starter, reference):
    """SIGTERM while the test split is evaluated, the run's last work: the run ends whole,
    and the command stops (a search or a list of runs would otherwise start the next run
    with the signal forgotten); resuming reads the finished run back."""
    out = tmp_path / "run"
    args = [*ARGS, "checkpoint_every=2", "--max-steps", "8", "--out", str(out)]
    run = _signalled(starter, tmp_path, "evaluate", 4, "TERM", *args)  # the test split's
    assert run.returncode == 143, run.stderr
    line = _one_line(run.stderr)
    assert line.startswith("ctrlrnn train: interrupted by SIGTERM at step 8; checkpoint ")
    resumed = _train(starter, *_resume_from(line), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resume: {out} finished at step 8" in resumed.stderr
    assert _history(out) == _history(reference)
    assert json.loads((out / "result.json").read_text())["test"] == json.loads(
        (reference / "result.json").read_text())["test"]


def test_a_signal_while_the_task_is_set_up_releases_the_lock(tmp_path, starter):
    """SIGTERM before the training loop (the task's set-up): one line, exit 143, and the lock
    file names no process, so the next run takes the directory without a word."""
    out = tmp_path / "run"
    run = _signalled(starter, tmp_path, "setup", 1, "TERM", *ARGS, "--max-steps", "4",
                     "--out", str(out))
    assert run.returncode == 143, run.stderr
    assert _one_line(run.stderr) == (
        "ctrlrnn train: interrupted by SIGTERM before the first checkpoint; nothing to resume")
    assert _lock_holder(out) == ""
    again = _train(starter, *ARGS, "--max-steps", "2", "--out", str(out), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "lock:" not in again.stderr


def test_a_ctrl_c_keeps_its_exit_status_and_words(tmp_path, starter):
    out = tmp_path / "run"
    run = _signalled(starter, tmp_path, "step", 2, "INT", *ARGS, "--max-steps", "8", "--out",
                     str(out))
    assert run.returncode == 130, run.stderr
    assert _one_line(run.stderr).startswith("ctrlrnn train: interrupted at step 2; checkpoint ")


# ---------------------------------------------------------------- torchrun
def _torchrun(nproc: int, *args: str) -> list[str]:
    """torchrun's agent (forked by the starter) of ``nproc`` fresh processes running ARGS."""
    return ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *args]


def test_a_signal_to_one_process_of_torchrun_stops_every_process_at_the_same_step(tmp_path,
                                                                                  starter):
    """SIGTERM reaching rank 1 alone during step 3: both processes stop after step 3 (rank 0
    writes its checkpoint), rank 0 says so in one line, both exit 143."""
    wrapper = tmp_path / "signalled_ctrlrnn.py"
    wrapper.write_text(WRAPPER)
    out = tmp_path / "run"
    proc = starter.run(
        _torchrun(2, str(wrapper), "train", *ARGS, "checkpoint_every=1000", "batch_size=16",
                  "--max-steps", "100", "--out", str(out)), cwd=tmp_path,
        env={"SIGNAL_AT": "step", "SIGNAL_CALL": "3", "SIGNALS": "TERM", "SIGNAL_RANK": "1"})
    said = [line for line in proc.stderr.splitlines() if line.startswith("ctrlrnn train:")]
    assert len(said) == 1, proc.stderr
    # rank 0 says it, or (when torchrun stops it first, on rank 1's exit) its stop handler
    assert re.match(r"ctrlrnn train: interrupted by SIGTERM (at step 3; checkpoint |; the last "
                    r"checkpoint is .* \(step 3\); resume with: )", said[0]), said[0]
    assert Checkpoint(out / "checkpoint.safetensors").progress["step"] == 3
    assert proc.stderr.count("exitcode  : 143") == 2, proc.stderr
    assert _lock_holder(out) == ""


def test_a_batch_torchrun_cannot_split_is_refused_before_any_process_sets_up(tmp_path,
                                                                             starter):
    out = tmp_path / "run"
    proc = starter.run(_torchrun(2, "-m", "ctrlrnn", "train", *ARGS, "batch_size=15",
                                 "--max-steps", "4", "--out", str(out)), cwd=tmp_path)
    said = [line for line in proc.stderr.splitlines() if line.startswith("ctrlrnn train:")]
    assert said == ["ctrlrnn train: batch_size: 15 cannot be split equally among the 2 "
                    "processes torchrun started; choose a multiple of 2 (e.g. 14 or 16)"], (
        proc.stderr)
    assert proc.stderr.count("exitcode  : 2") >= 1, proc.stderr
    assert "Traceback (most recent call last):\n  File \"" + str(Path(cli.__file__)) not in (
        proc.stderr)
    assert not out.exists()  # refused before the run directory (or the data) was touched


def test_a_batch_split_is_checked_against_the_processes_launched(monkeypatch):
    from ctrlrnn.train.distributed import check_batch_split

    check_batch_split(64, 1)
    check_batch_split(64, 4)
    with pytest.raises(ValueError, match=r"^batch_size: 10 cannot be split equally among the "
                                         r"4 processes .* \(e\.g\. 8 or 12\)$"):
        check_batch_split(10, 4)
    with pytest.raises(ValueError, match=r"\(e\.g\. 4\)$"):
        check_batch_split(3, 4)  # no smaller multiple


# ---------------------------------------------------------------- no optimizer step
def _train_here(out: Path, *args: str, argv: list[str] = ARGS
                ) -> subprocess.CompletedProcess[str]:
    """``ctrlrnn train`` in this process, its stdout and stderr captured."""
    err, printed = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(printed):
        code = cli.main(["train", *argv, "--out", str(out), *args])
    return subprocess.CompletedProcess([], code, printed.getvalue(), err.getvalue())


@pytest.mark.parametrize("settings,start", [
    # the case: 20 examples, the default batch of 64
    (["task.train_size=20", "batch_size=64"], "batch_size: 64 leaves no full batch"),
    (["task.train_size=31"], "batch_size: 32 leaves no full batch"),  # one example short
    (["task.train_size=20", "batch_size=100000"], "batch_size: 100000 leaves no full batch"),
])
def test_training_data_smaller_than_a_batch_is_refused_before_training(tmp_path, settings,
                                                                       start):
    out = tmp_path / "run"
    run = _train_here(out, "--max-steps", "4", *settings)
    assert run.returncode == 2, run.stderr
    line = _one_line(run.stderr)
    assert line.startswith(f"ctrlrnn train: {start} in the training data of task 'copy', so "
                           "an epoch would take no optimizer step; lower batch_size (or raise "
                           "task.train_size="), line
    assert run.stdout == ""
    written = sorted(p.name for p in out.iterdir()) if out.exists() else []
    assert written in ([], [".lock"])  # no checkpoint, log, report or metrics


def test_training_data_of_exactly_one_batch_trains(tmp_path):
    run = _train_here(tmp_path / "run", "--max-steps", "2", "task.train_size=32")
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("step 2 (")


def test_a_task_that_refuses_the_batch_itself_is_one_line(tmp_path):
    """A task whose batching raises on a batch larger than its data (``logic``) is refused
    the same way, before training."""
    argv = ["--task", "logic", "--model", "qrnn", "--no-progress", "model.hidden_size=8",
            "task.train_size=20", "task.valid_size=8", "task.test_per_count=2"]
    run = _train_here(tmp_path / "run", "--max-steps", "2", argv=argv)
    assert run.returncode == 2, run.stderr
    assert _one_line(run.stderr).startswith("ctrlrnn train: batch_size: ")
    assert not (tmp_path / "run" / "checkpoint.safetensors").exists()


# ---------------------------------------------------------------- memory
@pytest.mark.parametrize("task,setting,start", [
    ("copy", "task.digits=100000", "task.digits: 100000 needs about "),
    ("addition", "task.digits=1000000", "task.digits: 1000000 needs about "),
    ("sort", "task.max_length=10000000", "task.max_length: 10000000 needs about "),
])
def test_a_task_option_too_large_for_memory_is_refused_at_once(tmp_path, task, setting, start):
    """Refused from the options alone, before any example is generated (which at these sizes
    takes longer than the test's limit)."""
    argv = ["--task", task, "--model", "qrnn", "--no-progress", "device=cpu"]
    started = time.monotonic()
    run = _train_here(tmp_path / "run", "--max-steps", "2", setting, argv=argv)
    assert run.returncode == 2, run.stderr
    line = _one_line(run.stderr)
    assert line.startswith(f"ctrlrnn train: {start}"), line
    assert "more than cpu memory holds" in line or "more than this machine's memory" in line
    assert time.monotonic() - started < 60
    assert not (tmp_path / "run").exists()


def test_the_memory_estimate_leaves_ordinary_options_alone():
    from ctrlrnn.tasks.seq2seq_tasks import AdditionTask, CopyTask
    from ctrlrnn.train.run import host_memory

    have = host_memory()
    assert have is not None and have > 0
    for cls in (CopyTask, AdditionTask):
        opts = {k: d for k, (_t, d) in cls.options.items()}
        assert all(need.bytes < 2**30 for need in cls({**opts, "digits": 40}, 0).memory_needs(64))


def test_running_out_of_memory_while_training_is_one_line(tmp_path, monkeypatch):
    """An allocation that fails at a training step (the allocator's own words) is one line
    naming the sizes set above their defaults and the checkpoint that is kept."""
    from ctrlrnn.train import trainer

    real = trainer.training_step

    def allocates_too_much(*args: Any, **kwargs: Any) -> torch.Tensor:
        allocates_too_much.calls += 1
        if allocates_too_much.calls == 3:
            raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: "
                               "can't allocate memory: you tried to allocate 2560000000000 "
                               "bytes. Error code 12 (Cannot allocate memory)")
        return real(*args, **kwargs)

    allocates_too_much.calls = 0
    monkeypatch.setattr(trainer, "training_step", allocates_too_much)
    out = tmp_path / "run"
    run = _train_here(out, "--max-steps", "8", "checkpoint_every=2", "task.eval_batch_size=300")
    assert run.returncode == 2, run.stderr
    assert _one_line(run.stderr) == (
        "ctrlrnn train: memory: training ran out of memory on cpu (2,560,000,000,000 bytes "
        "asked for); choose smaller values of the sizes set above their defaults "
        f"(task.eval_batch_size=300); {out / 'checkpoint.safetensors'} holds step 2")
    assert _lock_holder(out) == ""


# ---------------------------------------------------------------- checkpoints and models
def test_eval_of_a_checkpoint_that_does_not_fit_its_model_is_one_line(tmp_path):
    """``ctrlrnn eval`` on a checkpoint whose weights are not those of the model its stored
    configuration builds: one line naming the checkpoint and the parameter, exit 2."""
    out = tmp_path / "run"
    assert _train_here(out, "--max-steps", "2").returncode == 0
    stored = Checkpoint(out / "best.safetensors")
    config = json.loads(json.dumps(stored.config))
    config["model_args"]["hidden_size"] = 16
    from ctrlrnn.train.run import rebuild_from_checkpoint

    _cfg, _task, model, _ckpt = rebuild_from_checkpoint(out / "best.safetensors")
    stored.restore(model, rng=False)
    other = save_checkpoint(tmp_path / "other.safetensors", model, config=config)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(["eval", "--checkpoint", str(other), "--device", "cpu"])
    assert code == 2
    line = _one_line(err.getvalue())
    assert line.startswith(f"ctrlrnn eval: checkpoint: {other}: its weights do not fit the "
                           "model: "), line
    assert " has shape [" in line and " in the checkpoint, [" in line


def test_resume_advice_names_only_overrides_the_target_model_accepts(tmp_path):
    """A QRNN run resumed with ``--model lstm``: the QRNN's options cannot be given to the
    LSTM and its weights cannot load into it, so no ``--override`` is suggested."""
    out = tmp_path / "run"
    assert _train_here(out, "--max-steps", "2").returncode == 0
    lstm = [a if a != "qrnn" else "lstm" for a in ARGS]
    run = _train_here(out, "--max-steps", "4", "--resume", argv=lstm)
    assert run.returncode == 2
    line = _one_line(run.stderr)
    assert "model qrnn -> lstm" in line
    assert "--override" not in line
    assert line.endswith("so it cannot continue with them: resume it with its own settings, "
                         "or train into a new --out")


def test_resume_advice_never_suggests_an_override_whose_weights_do_not_load(tmp_path):
    out = tmp_path / "run"
    assert _train_here(out, "--max-steps", "2").returncode == 0
    run = _train_here(out, "--max-steps", "4", "--resume", "model.hidden_size=16")
    assert run.returncode == 2
    line = _one_line(run.stderr)
    assert "(model.hidden_size 8 -> 16)" in line and "--override" not in line
    assert "does not fit the model these settings build (" in line


def test_override_advice_leaves_out_options_of_the_model_changed_from():
    from ctrlrnn.train.config_changes import config_differences, override_advice

    qrnn = {"model": "qrnn", "lr": 0.1, "model_args": {"hidden_size": 8, "window": 2},
            "task_args": {}}
    lstm = {"model": "lstm", "lr": 0.2, "model_args": {"hidden_size": 8}, "task_args": {}}
    differ = config_differences(qrnn, lstm)
    assert differ == {"model": ("qrnn", "lstm"), "lr": (0.1, 0.2),
                      "model.window": (2, None)}
    assert override_advice(differ, lstm) == "--override model=lstm --override lr=0.2"
    # accepting the model accepts that its options go with it
    assert config_differences(qrnn, lstm, frozenset({"model", "lr"})) == {}
    # a stored option the same model no longer has cannot be named
    older = {**lstm, "model": "qrnn", "model_args": {"hidden_size": 8}}
    gone = config_differences(qrnn, older)
    assert override_advice(gone, older) is None
