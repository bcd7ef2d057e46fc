"""Each final run's validation curve in the results file, its figure on the pages, and the
curves added afterwards from the runs' directories."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest

from ctrlrnn.reproduce import pages, runner
from ctrlrnn.reproduce.experiments import Arm, Claim, Experiment
from ctrlrnn.reproduce.learning_curves import (
    add_missing_curves,
    curve_of_run,
    curves_caption,
    read_curve,
)

#: two arms, two seeds, evaluated every 2 of 6 steps: three points a curve
CURVED = Experiment(
    id="curved-copy", paper="qrnn", title="curved copy", task="copy", metric="token_accuracy",
    higher_is_better=True,
    arms=(Arm("LSTM", "lstm", {"hidden_size": 8}), Arm("QRNN", "qrnn", {"hidden_size": 8})),
    claims=(Claim("QRNN", "LSTM", "nowhere"),),
    quick={"max_steps": 6, "epochs": 3, "eval_every": 2, "batch_size": 16,
           "task.train_size": 32, "task.valid_size": 16, "task.test_size": 16},
    full={}, task_args={"digits": 3}, seeds_quick=2,
)


def _quiet(line: str) -> None:
    pass


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The experiment trained once: (its runs directory, its results directory, its data)."""
    root = tmp_path_factory.mktemp("curves")
    data = runner.run_experiment(CURVED, "quick", root / "runs", root / "results",
                                 show_progress=False, log=_quiet)
    return root / "runs", root / "results", data


def _copy(trained, tmp_path):
    runs, results, _data = trained
    shutil.copytree(runs, tmp_path / "runs")
    shutil.copytree(results, tmp_path / "results")
    return tmp_path / "runs", tmp_path / "results"


def test_read_curve_keeps_the_last_record_of_each_step(tmp_path):
    lines = [
        {"step": 2, "epoch": 0, "split": "train", "loss": 1.0},
        {"step": 4, "epoch": 1, "split": "valid", "valid_accuracy": 0.5},
        {"step": 2, "epoch": 0, "split": "valid", "valid_accuracy": 0.25},
        {"step": 4, "epoch": 1, "split": "valid", "valid_accuracy": 0.75},  # resumed: wins
        {"step": 6, "epoch": 1, "split": "valid", "valid_loss": 0.1},  # not the metric
        {"step": 8, "epoch": 1, "split": "test", "valid_accuracy": 0.9},  # not validation
    ]
    text = "\n".join(json.dumps(r) for r in lines) + '\n{"step": 10, "split": "val'
    (tmp_path / "log.jsonl").write_text(text)
    assert read_curve(tmp_path, "accuracy") == [[2, 0.25], [4, 0.75]]
    assert read_curve(tmp_path, "perplexity") == []
    assert read_curve(tmp_path / "absent", "accuracy") == []


def test_every_final_run_keeps_its_validation_curve(trained):
    _runs, _results, data = trained
    for arm in data["arms"].values():
        for seed in arm["seeds"].values():
            steps = [step for step, _value in seed["curve"]]
            assert steps == [2, 4, 6]
            assert all(0.0 <= value <= 1.0 for _step, value in seed["curve"])
            # the checkpoint the test is scored at, at the value the results file holds for it
            assert curve_of_run(seed["curve"], seed)


def test_curves_are_added_back_from_the_runs_directories(trained, tmp_path):
    runs, results = _copy(trained, tmp_path)
    path = runner.results_path(results, "quick", CURVED)
    full = json.loads(path.read_text())
    bare = json.loads(path.read_text())
    for arm in bare["arms"].values():
        for seed in arm["seeds"].values():
            del seed["curve"]
    runner.write_results(path, bare)
    assert runner.add_run_curves(CURVED, "quick", runs, results) == 4
    assert json.loads(path.read_text()) == full
    assert runner.add_run_curves(CURVED, "quick", runs, results) == 0  # nothing left to add


def test_a_curve_of_another_run_is_not_taken(trained, tmp_path):
    runs, _results = _copy(trained, tmp_path)
    _r, _s, data = trained
    data = json.loads(json.dumps(data))
    entry = data["arms"]["LSTM"]["seeds"]["0"]
    del entry["curve"]
    held = entry["valid_selected"]
    entry["valid_selected"] = held + 0.5  # a later run of the same name evaluated otherwise
    run_of = lambda label, seed, params: runner.run_dir(  # noqa: E731
        runs, "quick", CURVED, label, seed, params)
    assert add_missing_curves(data, CURVED, run_of) == 0 and "curve" not in entry
    entry["valid_selected"] = held
    entry["steps"] = 4  # the directory's run went further than this one
    assert add_missing_curves(data, CURVED, run_of) == 0
    entry["steps"] = 6
    assert add_missing_curves(data, CURVED, run_of) == 1 and entry["curve"]
    shutil.rmtree(runs)
    del entry["curve"]
    assert add_missing_curves(data, CURVED, run_of) == 0  # no directory: nothing to read


def test_pages_draw_the_curves_and_count_the_runs_without_one(trained, tmp_path, monkeypatch):
    _runs, results = _copy(trained, tmp_path)
    monkeypatch.setattr(pages, "EXPERIMENTS", (CURVED,))
    docs = tmp_path / "docs"
    pages.write_pages(results, docs, "quick")
    page = (docs / "qrnn.md").read_text()
    assert "![curved copy: validation curves](qrnn-curved-copy-curves-quick.png)" in page
    assert (docs / "qrnn-curved-copy-curves-quick.png").stat().st_size > 0
    assert "are not shown" not in page

    path = runner.results_path(results, "quick", CURVED)
    data = json.loads(path.read_text())
    del data["arms"]["QRNN"]["seeds"]["1"]["curve"]
    assert "1 of the 4 runs is not shown" in curves_caption(CURVED, data)
    for arm in data["arms"].values():
        for seed in arm["seeds"].values():
            seed["curve"] = seed.get("curve", [[6, 0.5]])[-1:]  # evaluated once: no curve
    assert "4 of the 4 runs are not shown" in curves_caption(CURVED, data)
    runner.write_results(path, data)
    pages.write_pages(results, docs, "quick")
    assert "validation curves" not in (docs / "qrnn.md").read_text()
    assert not (docs / "qrnn-curved-copy-curves-quick.png").exists()  # no stale figure left


def test_pages_only_adds_the_curves_the_results_files_lack(trained, tmp_path, monkeypatch):
    from ctrlrnn import cli
    from ctrlrnn.reproduce import experiments

    runs, results = _copy(trained, tmp_path)
    path = runner.results_path(results, "quick", CURVED)
    data = json.loads(path.read_text())
    del data["arms"]["LSTM"]["seeds"]["1"]["curve"]
    runner.write_results(path, data)
    monkeypatch.setattr(experiments, "EXPERIMENTS", (CURVED,))
    monkeypatch.setattr(pages, "EXPERIMENTS", (CURVED,))
    assert cli.main(["reproduce", "--results", str(results), "--runs", str(runs), "--docs",
                     str(tmp_path / "docs"), "--quick", "--no-progress", "--pages-only"]) == 0
    again = json.loads(path.read_text())
    assert again["arms"]["LSTM"]["seeds"]["1"]["curve"] == trained[2]["arms"]["LSTM"][
        "seeds"]["1"]["curve"]


def test_a_seed_of_a_changed_experiment_keeps_its_curve(trained, tmp_path, monkeypatch):
    """A results file carried into a new run (an arm added) keeps the curves it holds."""
    runs, results = _copy(trained, tmp_path)
    grown = dataclasses.replace(CURVED, arms=(*CURVED.arms, Arm("QRNN 2", "qrnn",
                                                                 {"hidden_size": 4})))
    data = runner.run_experiment(grown, "quick", runs, results, show_progress=False, log=_quiet)
    assert data["arms"]["LSTM"] == trained[2]["arms"]["LSTM"]
    assert all(seed["curve"] for seed in data["arms"]["QRNN 2"]["seeds"].values())
