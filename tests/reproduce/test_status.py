"""``ctrlrnn reproduce --status``: arm by arm, what a results file holds under the definition
now (a search finished, under way at some rung, or not started; the seeds trained at its
choice; results of an earlier setting), and the runs a live process is training now."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from tiny_runs import tiny_halving_experiment

from ctrlrnn.cli import main
from ctrlrnn.reproduce import runner
from ctrlrnn.reproduce.status import status_lines
from ctrlrnn.reproduce.tuning import IN_PROGRESS
from ctrlrnn.train.run_lock import RunLock

EXP = tiny_halving_experiment("tiny-status", seeds=2)


def _fake_training(monkeypatch) -> None:
    """Trials and seeds that finish at once, each trial's accuracy set by its learning rate."""

    def trial(exp, arm, mode, runs_dir, show_progress, number, overrides, out):
        out.mkdir(parents=True, exist_ok=True)
        value = 1.0 - abs(overrides["lr"] - 5e-3)
        return {"valid": {"token_accuracy": value}, "test": {"token_accuracy": value},
                "step": overrides["max_steps"], "best_step": overrides["max_steps"],
                "stop_reason": "max_steps", "train_seconds": 30.0}

    def seed(exp, arm, seed, mode, runs_dir, show_progress, params=None):
        return {"valid": {"token_accuracy": 0.5}, "test": {"token_accuracy": 0.5}, "step": 3,
                "best_step": 3, "stop_reason": "max_steps", "train_seconds": 90.0,
                "epochs_completed": 1, "parameters": 1}

    monkeypatch.setattr(runner, "run_trial", trial)
    monkeypatch.setattr(runner, "run_one", seed)


@pytest.fixture
def trained(tmp_path, monkeypatch) -> Path:
    """EXP trained (fake) in quick mode; its results file's path."""
    _fake_training(monkeypatch)
    runner.run_experiment(EXP, "quick", tmp_path / "runs", tmp_path / "results",
                          show_progress=False, log=lambda s: None)
    return runner.results_path(tmp_path / "results", "quick", EXP)


def _status(tmp_path: Path, exp=EXP) -> str:
    return "\n".join(status_lines([exp], "quick", tmp_path / "results", tmp_path / "runs"))


def test_a_finished_experiment_is_final(tmp_path, trained):
    text = _status(tmp_path)
    # 3 trials of 30 s (a continued trial's clock holds its earlier rungs), 2 seeds of 90 s
    assert "tiny-status: tiny copy (tiny-status); final under its definition now, 4.5 min" in text
    assert "QRNN  search finished; seeds 2 of 2" in text
    assert "1 of 1 experiment(s) final under their definition now; 0 arm(s) left" in text


def test_a_search_under_way_counts_its_trials_rung_by_rung(tmp_path, trained):
    data = json.loads(trained.read_text())
    arm = data["arms"]["QRNN"]
    record = arm.pop("tuning")
    first = [dict(row, rung=0, rungs=row["rungs"][:1]) for row in record["trials"][:2]]
    arm[IN_PROGRESS] = {**record, "trials": first, "best_trial": None, "chosen": {}}
    arm["seeds"] = {}
    data["complete"] = False
    trained.write_text(json.dumps(data))
    text = _status(tmp_path)
    assert "search under way (rung 1: 2 of 3, rung 2: 0 of 2); seeds 0 of 2" in text
    assert "in progress under its definition now" in text
    assert "0 of 1 experiment(s) final under their definition now; 1 arm(s) left" in text


def test_results_of_an_earlier_setting_are_named_as_what_the_page_shows(tmp_path, trained):
    bigger = dataclasses.replace(EXP, quick={**EXP.quick, "task.train_size": 128})
    text = _status(tmp_path, bigger)
    assert ("QRNN  search not started; seeds 0 of 2; meanwhile the page shows 2 seed(s) of an "
            "earlier search or setting") in text
    assert "not started under its definition now" in text


def test_a_run_whose_lock_a_live_process_holds_is_training_now(tmp_path, trained):
    run = runner.run_dir(tmp_path / "runs", "quick", EXP, "QRNN", 1)
    left = runner.run_dir(tmp_path / "runs", "quick", EXP, "QRNN", 0)
    gone = RunLock(left, quiet=True)  # a lock file left behind, no longer held
    gone.acquire()
    gone.release()
    (left / ".lock").write_text('{"pid": 1}')
    with RunLock(run, quiet=True):
        (run / "log.jsonl").write_text(
            '{"step": 7, "epoch": 1, "split": "train"}\n{"step": 8, "ep')  # a row being written
        text = _status(tmp_path)
    assert "training now: tiny-status/qrnn-seed1 (step 7, epoch 1)" in text
    assert "qrnn-seed0" not in text
    assert "training now" not in _status(tmp_path)


def test_the_command_reads_only(tmp_path, trained, capsys):
    args = ["reproduce", "--quick", "--status", "--only", "copy", "--results",
            str(tmp_path / "results"), "--runs", str(tmp_path / "runs")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out.startswith("quick mode: results in ") and "qrnn-copy:" in out
    assert main([*args, "--rerun", "qrnn-copy"]) == 2
    assert "--status only reads" in capsys.readouterr().out
    # at the paper's scale it reads without the user's data files the training would need
    paper = ["reproduce", "--scale", "paper", "--status", "--only", "qrnn-imdb", "--results",
             str(tmp_path / "results"), "--runs", str(tmp_path / "runs")]
    assert main(paper) == 0
    assert "qrnn-imdb: " in capsys.readouterr().out
