"""The ``monitor`` key: the validation metric that drives early stopping and the best
checkpoint, when it is not the task's own (a translation selected by its loss, scored by BLEU)."""

from __future__ import annotations

import pytest

from ctrlrnn.metric_conventions import higher_is_better
from ctrlrnn.train.config import ConfigError
from ctrlrnn.train.trainer import config_differences


def test_directions():
    assert not higher_is_better("loss") and not higher_is_better("perplexity")
    assert higher_is_better("bleu") and higher_is_better("exact_match")


def test_the_monitored_loss_stops_the_run_and_picks_the_checkpoint(scripted_trainer):
    # the task's metric (exact match) keeps rising; the loss is lowest at evaluation 2 and
    # then rises: selected by the loss, the run stops 3 evaluations after it, and the best
    # checkpoint is evaluation 2's, whatever exact match says
    loss = [2.0, 1.0, 1.5, 1.6, 1.7, 1.8, 1.9, 2.0]
    exact = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]
    trainer, calls = scripted_trainer({"loss": loss, "exact_match": exact}, patience=3,
                                      monitor="loss")
    result = trainer.fit()
    assert calls["probe"] == 1
    assert result["stop_reason"] == "patience"
    assert result["best_step"] == 2 and result["step"] == 5
    assert result["metric"] == "loss"
    assert trainer.progress["best"] == 1.0


def test_without_monitor_the_tasks_metric_selects(scripted_trainer):
    loss = [2.0, 1.0, 1.5, 1.6, 1.7, 1.8, 1.9, 2.0]
    exact = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]
    trainer, _ = scripted_trainer({"loss": loss, "exact_match": exact}, patience=3,
                                  max_steps=6)
    result = trainer.fit()
    assert result["stop_reason"] == "max_steps" and result["best_step"] == 6
    assert result["metric"] == "exact_match"


def test_a_metric_the_task_does_not_report_fails_before_training(scripted_trainer, tmp_path):
    trainer, _ = scripted_trainer({}, monitor="blue")
    with pytest.raises(ConfigError, match=r"monitor: .*'blue'.*exact_match.*loss"):
        trainer.fit()
    assert trainer.progress["step"] == 0  # not a step was trained
    assert not (tmp_path / "checkpoint.safetensors").exists()


@pytest.mark.parametrize("bad", ["Loss", "valid loss", "loss;", "1loss"])
def test_a_malformed_monitor_is_refused_by_name(bad):
    from ctrlrnn.train.cli import validated_config

    with pytest.raises(ConfigError, match="monitor"):
        validated_config("copy", "lstm", {"monitor": bad})


def test_a_run_resumes_only_under_the_metric_it_was_selected_by(scripted_trainer):
    trainer, _ = scripted_trainer({"loss": [2.0, 1.0, 1.5]}, monitor="loss", max_steps=3)
    trainer.fit()
    stored = {**trainer.cfg.to_dict()}
    assert config_differences(stored, {**stored, "monitor": ""}) == {"monitor": ("loss", "")}
    # a run stored before the key existed was selected by the task's metric
    older = {k: v for k, v in stored.items() if k != "monitor"}
    assert config_differences(older, {**older, "monitor": ""}) == {}
    assert config_differences(older, {**older, "monitor": "loss"}) == {"monitor": ("", "loss")}
    again, _ = scripted_trainer({"loss": [2.0]}, monitor="", max_steps=6)
    with pytest.raises(ConfigError, match="monitor"):
        again.fit(resume=True)


def test_a_tie_of_the_monitored_metric_goes_to_the_lower_loss(scripted_trainer):
    # exact match stays at 0 while the model still learns (its loss falls): each evaluation
    # is the best so far, so the best checkpoint is the last one and patience never runs out
    loss = [3.0, 2.5, 2.0, 1.5, 1.2, 1.0]
    exact = [0.0] * 6
    trainer, _ = scripted_trainer({"loss": loss, "exact_match": exact}, patience=2,
                                  max_steps=6)
    result = trainer.fit()
    assert result["stop_reason"] == "max_steps" and result["best_step"] == 6
    assert trainer.progress["best_loss"] == 1.0


def test_a_tie_with_a_higher_loss_is_no_improvement(scripted_trainer):
    # the metric ties and the loss rises: the first evaluation stays the best, patience runs
    loss = [1.0, 1.2, 1.4, 1.6, 1.8, 2.0]
    exact = [0.5] * 6
    trainer, _ = scripted_trainer({"loss": loss, "exact_match": exact}, patience=2,
                                  max_steps=6)
    result = trainer.fit()
    assert result["stop_reason"] == "patience" and result["best_step"] == 1
    assert result["step"] == 3


def test_a_better_metric_wins_over_a_lower_loss(scripted_trainer):
    loss = [1.0, 2.0, 0.5]
    exact = [0.1, 0.2, 0.15]
    trainer, _ = scripted_trainer({"loss": loss, "exact_match": exact}, max_steps=3)
    result = trainer.fit()
    assert result["best_step"] == 2 and trainer.progress["best"] == 0.2
