"""A job that runs some experiments into a folder of its own writes their pages alone
(``--pages chosen``: the main job's ``runs/main/qrnn.md``), and what reproduce does with runs
that diverged or found the disk full."""

from __future__ import annotations

import dataclasses
import errno
import json
from pathlib import Path

import pytest

from ctrlrnn import cli, files
from ctrlrnn.reproduce import experiments, pages, runner
from ctrlrnn.reproduce.experiments import Arm, Claim, Experiment

TINY = Experiment(
    id="tiny-copy", paper="qrnn", title="tiny copy", task="copy", metric="token_accuracy",
    higher_is_better=True,
    arms=(Arm("LSTM", "lstm", {"hidden_size": 8}), Arm("QRNN", "qrnn", {"hidden_size": 8})),
    claims=(Claim("QRNN", "LSTM", "nowhere"),),
    quick={"max_steps": 3, "epochs": 1, "batch_size": 16, "task.train_size": 64,
           "task.valid_size": 16, "task.test_size": 16},
    full={}, task_args={"digits": 3}, seeds_quick=2,
)
#: an experiment on the same page that the job does not run, and one on another page
OTHER_SAME_PAGE = dataclasses.replace(TINY, id="tiny-sort", title="tiny sort, not run here")
OTHER_PAGE = dataclasses.replace(TINY, id="tiny-rcrn", paper="rcrn", title="tiny rcrn")


def _fake_result(*args: object, **kwargs: object) -> dict:
    return {"test": {"token_accuracy": 0.5}, "valid": {"token_accuracy": 0.5}, "step": 3,
            "train_seconds": 1.0, "epochs_completed": 1, "parameters": 1,
            "stop_reason": "max_steps"}


@pytest.fixture
def three(monkeypatch: pytest.MonkeyPatch) -> None:
    chosen = (TINY, OTHER_SAME_PAGE, OTHER_PAGE)
    monkeypatch.setattr(experiments, "EXPERIMENTS", chosen)
    monkeypatch.setattr(pages, "EXPERIMENTS", chosen)
    monkeypatch.setattr(runner, "run_one", _fake_result)


def _paths(tmp_path: Path) -> list[str]:
    return ["--results", str(tmp_path / "results"), "--runs", str(tmp_path / "runs"),
            "--docs", str(tmp_path / "docs"), "--quick", "--no-speed", "--no-progress"]


def test_pages_chosen_writes_the_page_of_the_experiment_run_alone(tmp_path, three, capsys):
    assert cli.main(["reproduce", *_paths(tmp_path), "--only", "tiny-copy",
                     "--pages", "chosen"]) == 0
    docs = tmp_path / "docs"
    assert sorted(p.name for p in docs.glob("*.md")) == ["qrnn.md"]
    page = (docs / "qrnn.md").read_text()
    assert "### tiny copy" in page and "QRNN beats LSTM" in page
    assert "tiny sort" not in page and "Not run yet" not in page
    assert "This page holds only the experiments this job ran: `tiny-copy`." in page
    assert f"pages: {docs / 'qrnn.md'}" in capsys.readouterr().out


def test_by_default_every_page_is_written_whole(tmp_path, three):
    assert cli.main(["reproduce", *_paths(tmp_path), "--only", "tiny-copy"]) == 0
    docs = tmp_path / "docs"
    names = {p.name for p in docs.glob("*.md")}
    assert {"qrnn.md", "rcrn.md", "README.md"} <= names and len(names) == len(pages.PAGES) + 1
    page = (docs / "qrnn.md").read_text()
    assert "### tiny sort, not run here" in page and "Not run yet" in page


def test_the_pages_name_when_their_newest_experiment_finished_and_what_is_open(tmp_path, three):
    assert cli.main(["reproduce", *_paths(tmp_path), "--only", "tiny-copy"]) == 0
    results, docs = tmp_path / "results", tmp_path / "docs"
    stored = runner.load_results(results, "quick", TINY)
    assert stored is not None and stored["finished"]
    # every page names the newest finished experiment of its own; none is open
    assert f"(newest finished experiment: {stored['finished']}); do not edit" in \
        (docs / "qrnn.md").read_text()
    assert "(no experiment finished); do not edit" in (docs / "rcrn.md").read_text()
    # a file whose experiment is not finished (here: one of its seeds gone) is named as open,
    # its runs being later than the time a file records only when its experiment finishes
    del stored["arms"]["QRNN"]["seeds"]["1"]
    stored["complete"] = False
    runner.results_path(results, "quick", TINY).write_text(json.dumps(stored))
    stamp = pages.results_stamp(results, "quick", (TINY, OTHER_SAME_PAGE, OTHER_PAGE))
    assert stamp == (f"newest finished experiment: {stored['finished']}; not finished under "
                     "the current definition: `tiny-copy`")


def test_the_main_job_asks_for_its_own_page() -> None:
    script = (Path(__file__).resolve().parents[2] / "scripts" / "run").read_text()
    command = " ".join(script.replace("\\\n", " ").split())
    assert "reproduce --quick --only qrnn-ptb-lm --pages chosen" in command
    assert "--docs runs/main" in command


def test_a_diverged_seed_is_named_in_its_table() -> None:
    seeds = [{"stop_reason": "patience"}, {"stop_reason": "diverged"}]
    assert pages._converged_cell(seeds).startswith("**diverged** (1 of 2")


def test_one_seed_shows_no_spread_and_several_show_theirs() -> None:
    assert pages._mean_std_cell([103.0]) == "103 ± –"
    assert pages._mean_std_cell([1.0, 3.0]) == "2 ± 1.4"
    assert pages._mean_std_cell([]) == "– ± –"


def test_a_full_disk_stops_reproduce_instead_of_failing_one_arm(tmp_path, monkeypatch):
    def full(*args: object, **kwargs: object) -> dict:
        raise files.NoSpaceLeft(tmp_path / "runs" / "checkpoint.safetensors")

    monkeypatch.setattr(runner, "run_one", full)
    with pytest.raises(OSError) as caught:
        runner.run_experiment(TINY, "quick", tmp_path / "runs", tmp_path / "results",
                              show_progress=False, log=lambda s: None)
    assert caught.value.errno == errno.ENOSPC
