"""An experiment's ``select``: the validation metric that drives its runs' early stopping, best
checkpoint and search, when it is not the reported test metric (translations: loss vs BLEU)."""

from __future__ import annotations

import dataclasses
import json

from ctrlrnn.reproduce import runner
from ctrlrnn.reproduce.cache_validity import Standing
from ctrlrnn.reproduce.experiments import Arm, Claim, Experiment, by_id
from ctrlrnn.reproduce.pages import experiment_section
from ctrlrnn.reproduce.tuning import Param, Tuning

SEARCH = Tuning(trials=3, params=(Param("lr", 1e-4, 1e-1, log=True),),
                overrides={"max_steps": 2}, startup=2)

BY_BLEU = Experiment(
    id="tiny-select", paper="translation", title="tiny", task="copy", metric="exact_match",
    higher_is_better=True,
    arms=(Arm("LSTM", "lstm", {"hidden_size": 8}), Arm("QRNN", "qrnn", {"hidden_size": 8})),
    claims=(Claim("QRNN", "LSTM", "nowhere"),),
    quick={"epochs": 5, "patience": 2, "batch_size": 16, "task.train_size": 64},
    full={}, task_args={"digits": 3}, seeds_quick=2, tuning_quick=SEARCH,
)
BY_LOSS = dataclasses.replace(BY_BLEU, select="loss")


def _result(lr: float) -> dict:
    # exact match is best at lr 1e-1, the loss at lr 1e-3: the two choose differently
    loss = abs(lr - 1e-3)
    return {"test": {"exact_match": lr, "loss": loss}, "valid": {"exact_match": lr, "loss": loss},
            "step": 2, "best_step": 2, "stop_reason": "patience", "train_seconds": 0.1,
            "epochs_completed": 1, "parameters": 1}


class Recorder:
    def __init__(self, monkeypatch):
        self.trial_overrides: list[dict] = []
        self.seeds: list[tuple[str, int]] = []
        monkeypatch.setattr(runner, "run_trial", self.trial)
        monkeypatch.setattr(runner, "run_one", self.seed)

    def trial(self, exp, arm, mode, runs_dir, show_progress, number, overrides, out):
        self.trial_overrides.append(overrides)
        out.mkdir(parents=True, exist_ok=True)
        result = _result(overrides["lr"])
        (out / "result.json").write_text(json.dumps(result))
        return result

    def seed(self, exp, arm, seed, mode, runs_dir, show_progress, params=None):
        self.seeds.append((arm.label, seed))
        return _result((params or {}).get("lr", 1e-3))

    def run(self, exp, tmp_path):
        self.seeds.clear()
        return runner.run_experiment(exp, "quick", tmp_path / "runs", tmp_path / "results",
                                     show_progress=False, log=lambda s: None)


def test_select_defaults_to_the_reported_metric():
    assert BY_BLEU.selected == "exact_match" and BY_BLEU.selected_higher_is_better
    assert "monitor" not in BY_BLEU.overrides("quick")
    assert BY_LOSS.selected == "loss" and not BY_LOSS.selected_higher_is_better
    assert BY_LOSS.overrides("quick")["monitor"] == "loss"
    assert BY_LOSS.overrides("full") == {"monitor": "loss"}


def test_the_runs_train_under_the_selecting_metric():
    from pathlib import Path

    cfg, _ = runner.config_for(BY_LOSS, BY_LOSS.arms[0], 0, "quick", Path("unused"))
    assert cfg.monitor == "loss"
    cfg, _ = runner.config_for(BY_BLEU, BY_BLEU.arms[0], 0, "quick", Path("unused"))
    assert cfg.monitor == ""


def test_the_search_chooses_by_the_selecting_metric(tmp_path, monkeypatch):
    fake = Recorder(monkeypatch)
    data = fake.run(BY_LOSS, tmp_path)
    assert data["selected_by"] == "loss"
    for arm in data["arms"].values():
        table = arm["tuning"]
        assert table["metric"] == "loss" and table["higher_is_better"] is False
        lowest = min(table["trials"], key=lambda r: r["valid"])
        assert table["chosen"] == lowest["params"]
        assert all(r["valid"] == abs(r["params"]["lr"] - 1e-3) for r in table["trials"])
        for seed in arm["seeds"].values():
            assert seed["selected_by"] == "loss"
            assert seed["valid_selected"] == seed["test_metrics"]["loss"]
            assert seed["test"] == seed["test_metrics"]["exact_match"]  # reported: the metric
    # by exact match, the same trials choose the highest learning rate
    other = fake.run(BY_BLEU, tmp_path / "bleu")
    for arm in other["arms"].values():
        table = arm["tuning"]
        assert table["metric"] == "exact_match"
        assert table["chosen"]["lr"] == max(r["params"]["lr"] for r in table["trials"])


def test_results_selected_by_another_metric_train_again(tmp_path, monkeypatch):
    fake = Recorder(monkeypatch)
    fake.run(BY_BLEU, tmp_path)
    results = tmp_path / "results"
    assert runner.is_cached(results, "quick", BY_BLEU)
    assert not runner.is_cached(results, "quick", BY_LOSS)
    data = json.loads((results / "quick" / "tiny-select.json").read_text())
    standing = Standing(BY_LOSS, "quick", data)
    entry = data["arms"]["LSTM"]
    assert not standing.tuning(BY_LOSS.arms[0], entry["tuning"])
    assert standing.other_setting(BY_LOSS.arms[0], entry["seeds"]["0"])
    fake.run(BY_LOSS, tmp_path)
    assert len(fake.seeds) == 4
    assert runner.is_cached(results, "quick", BY_LOSS)
    # an entry without a setting of its own takes the file's definition, select included
    data = json.loads((results / "quick" / "tiny-select.json").read_text())
    del data["arms"]["LSTM"]["seeds"]["0"]["setting"]
    assert Standing(BY_LOSS, "quick", data).same_setting(BY_LOSS.arms[0],
                                                          data["arms"]["LSTM"]["seeds"]["0"])
    assert Standing(BY_BLEU, "quick", data).other_setting(BY_BLEU.arms[0],
                                                           data["arms"]["LSTM"]["seeds"]["0"])


def test_the_page_names_the_selecting_metric(tmp_path, monkeypatch):
    fake = Recorder(monkeypatch)
    data = fake.run(BY_LOSS, tmp_path)
    text = "\n".join(experiment_section(BY_LOSS, data, tmp_path, "quick")[0])
    assert "validation loss has not improved for 2 evaluations" in text
    assert "best trial by validation loss" in text
    assert "| valid loss | steps (best) |" in text  # the trial table's score column
    assert "valid exact_match |" in text  # the seeds' table: the reported metric
    plain = "\n".join(experiment_section(BY_BLEU, fake.run(BY_BLEU, tmp_path / "b"),
                                         tmp_path, "quick")[0])
    assert "validation exact_match has not improved" in plain


def test_the_noisy_translations_select_by_loss():
    experiments = by_id()
    assert experiments["translation-char-qrnn"].selected == "loss"
    assert experiments["translation-cas"].selected == "loss"
    assert experiments["translation-transformer-metagross"].selected == "bleu"
    assert all(e.selected == e.metric for e in experiments.values()
               if e.id not in ("translation-char-qrnn", "translation-cas"))
