"""``ctrlrnn reproduce --jobs N``: the runs of an experiment train N at a time in worker
processes, and every run's numbers equal those of the one-at-a-time runner (same seeds, same
threads per run); the results file is the same but for timings."""

from __future__ import annotations

import json

import pytest
from tiny_runs import numbers

from ctrlrnn.cli import main
from ctrlrnn.reproduce import parallel, runner
from ctrlrnn.reproduce.experiments import Arm, Claim, Experiment
from ctrlrnn.reproduce.tuning import Param, Tuning

SEARCH = Tuning(trials=2, params=(Param("lr", 1e-3, 1e-2, log=True),), overrides={"max_steps": 2},
                startup=2, arm_streams=True)

TINY = Experiment(
    id="tiny-parallel", paper="qrnn", title="tiny copy, trained in parallel", task="copy",
    metric="token_accuracy", higher_is_better=True,
    arms=(Arm("LSTM", "lstm", {"hidden_size": 8}), Arm("QRNN", "qrnn", {"hidden_size": 8})),
    claims=(Claim("QRNN", "LSTM", "nowhere"),),
    quick={"max_steps": 4, "epochs": 1, "batch_size": 16, "task.train_size": 64,
           "task.valid_size": 16, "task.test_size": 16},
    full={}, task_args={"digits": 3}, seeds_quick=2, tuning_quick=SEARCH,
)



def test_two_jobs_give_the_numbers_of_one(tmp_path, one_torch_thread):
    quiet = lambda line: None  # noqa: E731
    one = runner.run_experiment(TINY, "quick", tmp_path / "runs1", tmp_path / "res1",
                                show_progress=False, log=quiet)
    lines: list[str] = []
    parallel.prefetch(TINY, "quick", tmp_path / "runs2", tmp_path / "res2", jobs=2, threads=1,
                      log=lines.append)
    assert any("2 searches" in ln for ln in lines) and any("4 runs" in ln for ln in lines)
    finished = sorted((tmp_path / "runs2").rglob("result.json"))
    assert len(finished) == 2 * 2 + 2 * 2  # two trials and two seeds an arm
    assert not (tmp_path / "res2").exists()  # the workers write runs, never results files
    mtimes = {p: p.stat().st_mtime_ns for p in finished}
    two = runner.run_experiment(TINY, "quick", tmp_path / "runs2", tmp_path / "res2",
                                show_progress=False, log=quiet)
    assert {p: p.stat().st_mtime_ns for p in finished} == mtimes  # read, not trained again
    assert sorted((tmp_path / "runs2").rglob("result.json")) == finished  # nothing trained again
    assert one["complete"] and two["complete"]
    assert numbers(one["arms"]) == numbers(two["arms"])
    for arm in two["arms"].values():
        assert all(seed["threads"] == 1 for seed in arm["seeds"].values())


def test_a_finished_experiment_starts_no_worker(tmp_path, one_torch_thread, monkeypatch):
    runner.run_experiment(TINY, "quick", tmp_path / "runs", tmp_path / "res",
                          show_progress=False, log=lambda line: None)

    def no_pool(*args, **kwargs):
        raise AssertionError("a worker pool was started for a finished experiment")

    monkeypatch.setattr(parallel, "ProcessPoolExecutor", no_pool)
    parallel.prefetch(TINY, "quick", tmp_path / "runs", tmp_path / "res", jobs=2, threads=1)


@pytest.mark.parametrize("flag", ["--jobs", "--threads"])
def test_jobs_and_threads_must_be_positive(flag, capsys):
    assert main(["reproduce", "--quick", "--only", "qrnn-copy", flag, "0"]) == 2
    assert f"{flag}: expected a positive number, got 0" in capsys.readouterr().out


def test_default_threads_share_the_cpus_out(monkeypatch):
    monkeypatch.setattr(parallel.os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    assert [parallel.default_threads(j) for j in (1, 2, 3, 8, 16)] == [8, 4, 2, 1, 1]
    assert json.dumps(parallel.default_threads(2)) == "4"
