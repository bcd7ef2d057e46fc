"""``ctrlrnn reproduce`` stopped by SIGTERM (a scheduler's stop) ends as Ctrl-C does: the run
under way stops at a step boundary with its checkpoint, one line says how to resume, and the
exit status tells the signal (128 + its number); the same command then finishes the work.

The command runs through a small wrapper (:data:`WRAPPER`) that shrinks the experiment to a
few tiny steps, which the first command takes slowly (each step waits first, using no CPU), so
that a run is still training when the signal comes; the command resuming it takes them at full
speed. It is forked from a process that has imported ctrlrnn (:mod:`warm_start`); the workers
of ``--jobs`` are started by the command itself, as always."""

from __future__ import annotations

import os
import signal
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import warm_start

#: ``python WRAPPER reproduce ...``: ``ctrlrnn`` (its signal handlers installed as on the command
#: line) with qrnn-copy's quick mode shrunk to 12 steps on 64 examples, logged from the first
#: step; each training step first waits ``$STEP_SECONDS`` when set. Module level, so the
#: workers of ``--jobs`` (which import it as their main module) run the same experiment.
WRAPPER = textwrap.dedent("""
    import dataclasses, os, sys, time

    import ctrlrnn.train.trainer as trainer
    from ctrlrnn.reproduce import experiments

    SMALL = {"max_steps": 12, "epochs": 20, "batch_size": 16, "eval_every": 6, "log_every": 1,
             "task.train_size": 64, "task.valid_size": 16, "task.test_size": 16}
    experiments.EXPERIMENTS = tuple(
        dataclasses.replace(e, quick=SMALL) if e.id == "qrnn-copy" else e
        for e in experiments.EXPERIMENTS)

    pause = float(os.environ.get("STEP_SECONDS", "0"))
    if pause:
        step = trainer.training_step

        def slow_step(*args, **kwargs):
            time.sleep(pause)
            return step(*args, **kwargs)

        trainer.training_step = slow_step

    if __name__ == "__main__":
        from ctrlrnn.cli import main

        sys.argv[0] = "ctrlrnn"
        sys.exit(main())
""")

#: how long a step of a command to be signalled waits: its runs last seconds, not milliseconds
SLOW = {"STEP_SECONDS": "0.5"}


@pytest.fixture(scope="module")
def starter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[warm_start.Starter]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    with warm_start.Starter((*warm_start.CTRLRNN_MODULES, "ctrlrnn.reproduce.runner"), env,
                            tmp_path_factory.mktemp("commands")) as started:
        yield started


def _argv(tmp_path: Path, *extra: str) -> list[str]:
    wrapper = tmp_path / "small_reproduce.py"
    wrapper.write_text(WRAPPER)
    return [str(wrapper), "reproduce", "--quick", "--only", "qrnn-copy", *extra, "--runs",
            str(tmp_path / "runs"), "--results", str(tmp_path / "results"), "--docs",
            str(tmp_path / "docs"), "--no-speed", "--no-progress"]


def _training_started(runs: Path, proc: warm_start.Command) -> None:
    """Wait until a run has logged its first step."""
    deadline = time.monotonic() + 300
    while not list(runs.rglob("log.jsonl")):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "training never started"
        time.sleep(0.05)


def test_a_stop_signal_during_training_checkpoints_and_says_how_to_resume(
        tmp_path: Path, starter: warm_start.Starter) -> None:
    signum = signal.SIGTERM  # Ctrl-C takes the same path (tests/train covers its words)
    runs, results = tmp_path / "runs", tmp_path / "results"
    argv = _argv(tmp_path)
    proc = starter.start(argv, cwd=tmp_path, env=SLOW)
    try:
        _training_started(runs, proc)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    if proc.returncode == 0:
        pytest.skip("the first run finished before the signal arrived")
    assert proc.returncode == 128 + signum, err
    words = "interrupted" if signum == signal.SIGINT else "interrupted by SIGTERM"
    lines = [ln for ln in err.splitlines() if ln.startswith("ctrlrnn reproduce:")]
    assert len(lines) == 1 and lines[0].startswith(f"ctrlrnn reproduce: {words}; "), err
    assert "Traceback" not in err
    assert list(runs.rglob("checkpoint.safetensors"))
    again = starter.run(argv, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert (results / "quick" / "qrnn-copy.json").is_file()


def _stat(pid: int) -> list[str]:
    """The fields of ``/proc/PID/stat`` after the command name (state first); none when the
    process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return []


def _children(pid: int) -> list[tuple[int, str]]:
    """``pid``'s child processes (Linux's /proc), each as its pid and start time: a pid taken
    over by another process once the child has gone has another start time."""
    found: list[tuple[int, str]] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text()
        found += [(int(p), stat[19]) for p in text.split() if (stat := _stat(int(p)))]
    return found


def _running(child: tuple[int, str]) -> bool:
    """Whether ``child`` (:func:`_children`) exists and has not ended (a zombie has ended)."""
    stat = _stat(child[0])
    return bool(stat) and stat[19] == child[1] and stat[0] not in ("Z", "X")


@pytest.mark.skipif(not Path(f"/proc/self/task/{os.getpid()}/children").exists(),
                    reason="reads each process's children from /proc (Linux)")
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_a_stopped_parallel_reproduce_leaves_no_worker_training(
        tmp_path: Path, starter: warm_start.Starter, how: str) -> None:
    """``--jobs 2``: a stop signal to the command reaches its workers (each stops at a step
    boundary with its checkpoint), and a command killed outright takes its workers with it."""
    runs = tmp_path / "runs"
    proc = starter.start(_argv(tmp_path, "--jobs", "2"), cwd=tmp_path, env=SLOW)
    workers: list[tuple[int, str]] = []
    try:
        _training_started(runs, proc)  # a worker has started training
        workers = _children(proc.pid)
        assert workers
        proc.send_signal(getattr(signal, how))
        proc.wait(timeout=120)
        deadline = time.monotonic() + 120
        while any(_running(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [w for w in workers if _running(w)]
    finally:
        proc.kill()
        for w in workers:
            if _running(w):
                os.kill(w[0], signal.SIGKILL)
    assert not left, f"workers still running after the command ended: {left}"
    if how == "SIGTERM":
        assert proc.returncode == 128 + signal.SIGTERM
