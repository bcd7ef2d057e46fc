"""The baseline probes' scripts, end to end at toy sizes: ``scripts/arm_probe.py`` trains an
experiment's arm at its chosen values with the settings given, records each seed once and reads
a recorded seed back; ``scripts/carnn_lm_data_probe.py`` trains the CARNN LM's LSTM at several
training-set sizes, each under the whole split's vocabulary or its own slice's."""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import pytest
from script_modules import script_module

from ctrlrnn.reproduce.experiments import EXPERIMENTS
from ctrlrnn.reproduce.probe_tables import ARM, DATA_SIZE, probe_lines


@pytest.fixture()
def arm_probe(tmp_path, monkeypatch):
    with script_module("arm_probe") as module:
        yield _at_chosen(module, tmp_path, monkeypatch)


def _at_chosen(module, tmp_path, monkeypatch):
    results = tmp_path / "results"
    results.mkdir()
    chosen = {"lr": 0.003, "model.dropout": 0.1}
    (results / "metagross-tree.json").write_text(json.dumps(
        {"arms": {"BiLSTM": {"tuning": {"chosen": chosen}}}}))
    monkeypatch.setattr(module, "RESULTS", results)
    return module


def _run(module, monkeypatch, *argv: str) -> None:
    monkeypatch.setattr(sys, "argv", [module.__file__, *argv])
    module.main()


TREE = next(e for e in EXPERIMENTS if e.id == "metagross-tree")
TOY_TREES = ("task.train_size=128", "task.valid_size=32", "task.test_size=32", "max_steps=4",
             "epochs=2")


def test_arm_probe_records_each_seed_at_the_chosen_values(arm_probe, tmp_path, monkeypatch):
    out = tmp_path / "probe.json"
    argv = ("metagross-tree", "BiLSTM", *TOY_TREES, "--name", "toy", "--seeds", "0", "1",
            "--runs", str(tmp_path / "runs"), "--json", str(out))
    _run(arm_probe, monkeypatch, *argv)
    data = json.loads(out.read_text())
    assert data["cpus"] >= 1 and data["machine"] and data["written"].endswith("+00:00")
    assert data["kind"] == ARM and data["cpu_model"]
    # the settings given on the command line, apart from the chosen values they override
    assert data["probes"]["toy"]["overrides"] == {
        "task.train_size": 128, "task.valid_size": 32, "task.test_size": 32, "max_steps": 4,
        "epochs": 2}
    runs = data["probes"]["toy"]["runs"]
    assert [r["seed"] for r in runs] == [0, 1]
    for row in runs:
        assert row["settings"]["lr"] == 0.003 and row["settings"]["task.train_size"] == 128
        assert row["step"] == 4 and row["stop_reason"] == "max_steps"
        assert row["curve"] and all(0.0 <= v <= 1.0 for _, v in row["curve"])
        assert set(row["test"]) >= {"exact_match", "loss"}
    # recorded seeds are read back, not trained again: their run folders may be gone
    for run in (tmp_path / "runs").rglob("checkpoint.safetensors"):
        run.unlink()
    _run(arm_probe, monkeypatch, *argv)
    assert json.loads(out.read_text())["probes"]["toy"]["runs"] == runs
    assert not list((tmp_path / "runs").rglob("checkpoint.safetensors"))
    # a page renders the file: one row a seed, and the command that adds to it
    lines = "\n".join(probe_lines(replace(TREE, probe_files=(out.name,)), out.parent))
    rows = [line for line in lines.splitlines() if line.startswith(("| 0 |", "| 1 |"))]
    assert len(rows) == 2
    assert all("lr 0.003" in r and "train_size 128" in r and "| the step cap |" in r for r in rows)
    assert ("scripts/arm_probe.py metagross-tree BiLSTM epochs=2 max_steps=4 task.test_size=32 "
            "task.train_size=128 task.valid_size=32 --name toy --seeds 0 1") in lines
    # the same name with other settings would mix two probes under one table
    with pytest.raises(SystemExit, match="'toy' changes .* not .*another --name"):
        _run(arm_probe, monkeypatch, "metagross-tree", "BiLSTM", *TOY_TREES,
             "task.train_size=256", "--name", "toy", "--seeds", "2", *argv[-4:])
    assert [r["seed"] for r in json.loads(out.read_text())["probes"]["toy"]["runs"]] == [0, 1]


def test_arm_probe_refuses_what_it_cannot_train(arm_probe, tmp_path, monkeypatch):
    runs = ("--runs", str(tmp_path / "runs"), "--json", str(tmp_path / "p.json"))
    with pytest.raises(SystemExit, match="no arm 'LSTM'.*BiLSTM"):
        _run(arm_probe, monkeypatch, "metagross-tree", "LSTM", "--name", "x", *runs)
    with pytest.raises(SystemExit, match="no chosen values for 'S-BiLSTM'"):
        _run(arm_probe, monkeypatch, "metagross-tree", "S-BiLSTM", "--name", "x", *runs)
    with pytest.raises(SystemExit, match="no chosen values for 'S-BiLSTM'; give lr="):
        _run(arm_probe, monkeypatch, "metagross-tree", "S-BiLSTM", "model.dropout=0.1",
             "--name", "x", *runs)
    with pytest.raises(SystemExit, match="expected key=value"):
        _run(arm_probe, monkeypatch, "metagross-tree", "BiLSTM", "lr", "--name", "x", *runs)
    with pytest.raises(SystemExit, match="experiment: no experiment 'metagross-trees'"):
        _run(arm_probe, monkeypatch, "metagross-trees", "BiLSTM", "--name", "x", *runs)
    assert not (tmp_path / "p.json").exists()


def test_an_arm_still_in_its_search_takes_its_values_from_the_overrides(
        arm_probe, tmp_path, monkeypatch):
    out = tmp_path / "probe.json"
    _run(arm_probe, monkeypatch, "metagross-tree", "S-BiLSTM", *TOY_TREES, "lr=0.002",
         "model.dropout=0.2", "--name", "toy", "--runs", str(tmp_path / "runs"),
         "--json", str(out))
    (row,) = json.loads(out.read_text())["probes"]["toy"]["runs"]
    assert row["settings"]["lr"] == 0.002 and row["settings"]["model.dropout"] == 0.2
    assert row["step"] == 4


@pytest.fixture()
def carnn_probe():
    with script_module("carnn_lm_data_probe") as module:
        yield module


def test_carnn_lm_data_probe_compares_sizes_under_one_vocabulary(carnn_probe, tmp_path,
                                                                 monkeypatch):
    probe = carnn_probe
    source = tmp_path / "text"
    source.mkdir()
    # the first 40 training sentences use words 0-19, the next 40 words 20-39, the tests all
    def line(i: int, first: int, count: int) -> str:
        return " ".join(f"w{first + (3 * i + j) % count}" for j in range(5))

    splits = {"train": [line(i, 20 * (i >= 40), 20) for i in range(80)],
              "valid": [line(i, 0, 40) for i in range(12)],
              "test": [line(i, 0, 40) for i in range(12)]}
    for split, lines in splits.items():
        (source / f"{split}.txt").write_text("\n".join(lines) + "\n")
    out = tmp_path / "probe.json"
    argv = ["40:whole", "40:slice", "0:whole", "--max-steps", "2", "--source", str(source),
            "--runs", str(tmp_path / "runs"), "--json", str(out)]
    monkeypatch.setattr(sys, "argv", ["carnn_lm_data_probe.py", *argv])
    probe.main()
    data = json.loads(out.read_text())
    assert data["kind"] == DATA_SIZE and data["cpu_model"]
    rows = {r["run"]: r for r in data["runs"]}
    assert set(rows) == {"40:whole", "40:slice", "0:whole"}
    whole, sliced, every = rows["40:whole"], rows["40:slice"], rows["0:whole"]
    assert whole["vocabulary_size"] == every["vocabulary_size"] > sliced["vocabulary_size"]
    assert whole["test_unknown_share"] == every["test_unknown_share"] == 0.0
    assert sliced["test_unknown_share"] > 0.0
    assert all(r["step"] == 2 and r["curve"] for r in rows.values())
    carnn_lm = next(e for e in EXPERIMENTS if e.id == "carnn-lm")
    lines = probe_lines(replace(carnn_lm, probe_files=(out.name,)), out.parent)
    assert sum(line.startswith(("| 40 |", "| all |")) for line in lines) == 3
    monkeypatch.setattr(sys, "argv", ["carnn_lm_data_probe.py", "10:all"])
    with pytest.raises(SystemExit, match="SIZE:whole or SIZE:slice"):
        probe.main()
    sys.modules.pop("carnn_lm_data_probe", None)


def test_a_probe_keeps_what_another_probe_wrote_while_it_trained(arm_probe, tmp_path):
    """Two probes of one experiment side by side: each adds its run to the file as it is on
    disk when the run ends, not as it was when the probe started."""
    out = tmp_path / "probe.json"
    stale = arm_probe._read(out, "metagross-tree")  # what a probe reads as it starts
    mine = stale["probes"].setdefault("mine", {"arm": "BiLSTM", "overrides": {}, "runs": []})
    theirs = {"arm": "BiLSTM", "overrides": {"lr": 0.002}, "runs": []}
    arm_probe._record(out, "metagross-tree", "theirs", theirs, {"seed": 1, "step": 5})
    arm_probe._record(out, "metagross-tree", "mine", mine, {"seed": 2, "step": 7})
    arm_probe._record(out, "metagross-tree", "mine", mine, {"seed": 0, "step": 3})
    data = json.loads(out.read_text())
    assert data["probes"]["theirs"]["runs"] == [{"seed": 1, "step": 5}]
    assert [r["seed"] for r in data["probes"]["mine"]["runs"]] == [0, 2]
    assert mine["runs"] == data["probes"]["mine"]["runs"]
    assert data["kind"] == ARM and data["probes"]["theirs"]["overrides"] == {"lr": 0.002}


def test_a_stopped_probe_says_how_to_resume_and_exits_by_its_signal(arm_probe, tmp_path,
                                                                       monkeypatch, capsys):
    import signal

    from ctrlrnn.train.stops import TrainingInterrupted

    def stopped(*args, **kwargs):
        raise TrainingInterrupted(12, tmp_path / "checkpoint.safetensors", signal.SIGTERM)

    monkeypatch.setattr(arm_probe, "train_probe_run", stopped)
    out = tmp_path / "probe.json"
    with pytest.raises(SystemExit) as stop:
        _run(arm_probe, monkeypatch, "metagross-tree", "BiLSTM", "--name", "toy",
             "--json", str(out))
    assert stop.value.code == 128 + signal.SIGTERM
    assert "toy, seed 0: stopped at step 12; its checkpoint" in capsys.readouterr().err
    assert not out.exists()  # nothing recorded for a run not finished
