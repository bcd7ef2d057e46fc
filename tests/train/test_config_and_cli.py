"""Configuration checks happen before any work; the CLI writes a run's files."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from ctrlrnn.cli import main
from ctrlrnn.train.config import ConfigError, TrainConfig, check_options, load_config


def test_overrides_are_typed():
    cfg = load_config(None, {"lr": "0.01", "epochs": "3", "model.hidden_size": "64"})
    assert isinstance(cfg, TrainConfig)
    assert cfg.lr == 0.01 and cfg.epochs == 3 and cfg.model_args == {"hidden_size": "64"}
    assert load_config(None, {"lr": "1"}).lr == 1.0  # an int is a valid float


@pytest.mark.parametrize(
    "overrides,match",
    [
        ({"learning_rate": "0.1"}, "learning_rate: unknown configuration key"),
        ({"epochs": "two"}, "epochs: expected a value of type int"),
        ({"epochs": "1.5"}, "epochs: expected a value of type int"),
        ({"lr": "fast"}, "lr: expected a value of type float"),
        ({"batch_size": "0"}, "batch_size: expected a positive integer"),
        ({"lr_decay": "1.5"}, "lr_decay: expected a number in"),
    ],
)
def test_bad_overrides_are_refused(overrides, match):
    with pytest.raises(ConfigError, match=match):
        load_config(None, overrides)


def test_booleans_take_tomls_and_pythons_spelling():
    """``model.bidirectional=True`` as a Python user types it, ``true`` as TOML writes it."""
    declared = {"bidirectional": (bool, False), "context": (int | None, None)}
    for raw, want in (("true", True), ("True", True), ("TRUE", True), ("false", False),
                      ("False", False)):
        assert check_options("model", "rcrn", {"bidirectional": raw}, declared) == {
            "bidirectional": want, "context": None}
    for bad in ("yes", "1", "Truth"):
        with pytest.raises(ConfigError, match="model.bidirectional: expected a value of type bool"):
            check_options("model", "rcrn", {"bidirectional": bad}, declared)
    with pytest.raises(ConfigError, match="model.context: expected a value of type"):
        check_options("model", "rcrn", {"context": "True"}, declared)  # not an int


def test_toml_file(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('lr = 0.5\nepochs = 2\n[model]\nhidden_size = 32\n[task]\ndigits = 3\n')
    cfg = load_config(path, {"epochs": "4"})
    assert cfg.lr == 0.5 and cfg.epochs == 4
    assert cfg.model_args == {"hidden_size": 32} and cfg.task_args == {"digits": 3}
    bad = tmp_path / "bad.toml"
    bad.write_text("lr = [\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad, {})


def test_check_options():
    declared = {"digits": (int, 5), "p": (float, 0.7)}
    assert check_options("task", "copy", {"digits": "3"}, declared) == {"digits": 3, "p": 0.7}
    with pytest.raises(ConfigError, match="task.depth: unknown option for task 'copy'"):
        check_options("task", "copy", {"depth": 3}, declared)
    with pytest.raises(ConfigError, match="task.digits: expected a value of type int"):
        check_options("task", "copy", {"digits": "x"}, declared)


def test_qrnn_window_per_layer_and_causal_options():
    """``model.window`` is an int or a list of ints (TOML on the command line), every element
    checked; ``model.causal`` a bool; the encoder gets them as given."""
    from ctrlrnn.models.encoders import SequenceEncoder, encoder_options
    from ctrlrnn.train.cli import validated_config

    cfg, _ = validated_config("translate-char", "qrnn", {
        "model.window": "[6, 2]", "model.causal": "false", "model.num_layers": "2"})
    assert cfg.model_args["window"] == [6, 2] and cfg.model_args["causal"] is False
    enc = SequenceEncoder("qrnn", 3, {**cfg.model_args, "hidden_size": 4})
    assert enc.rnn.windows == (6, 2) and enc.rnn.causal is False
    assert encoder_options("qrnn", {"window": 3})["window"] == 3
    assert encoder_options("qrnn", {})["causal"] is True
    for bad in ("[6, 0.5]", "[6, true]", "'6'"):
        with pytest.raises(ConfigError, match="model.window: expected a value of type"):
            encoder_options("qrnn", {"window": bad})
    with pytest.raises(ValueError, match="window: expected a positive integer or 2"):
        SequenceEncoder("qrnn", 3, {"num_layers": 2, "window": [6, 2, 2]})
    with pytest.raises(ConfigError, match="model.causal: expected a value of type bool"):
        encoder_options("qrnn", {"causal": "sometimes"})


@pytest.mark.parametrize(
    "argv,match",
    [
        (["--task", "nope", "--model", "qrnn"], "task: unknown task 'nope'"),
        (["--task", "copy", "--model", "transformerxl"], "model: unknown encoder"),
        (["--task", "copy", "--model", "qrnn", "model.windw=3"], "model.windw: unknown option"),
        (["--task", "copy", "--model", "qrnn", "task.digits=many"], "task.digits: expected"),
        (["--task", "copy", "--model", "qrnn", "lr=abc"], "lr: expected a value of type float"),
        (["--task", "copy", "--model", "qrnn", "nonsense"], "nonsense: expected key=value"),
        (["--task", "copy", "--model", "qrnn", "hidden_size=64"],
         "hidden_size: unknown configuration key; did you mean model.hidden_size?"),
        (["--task", "copy", "--model", "qrnn", "digits=3"],
         "digits: unknown configuration key; did you mean task.digits?"),
        (["--task", "copy", "--model", "qrnn", "lr_decy=0.9"], "did you mean lr_decay?"),
        (["--task", "copy", "--model", "qrnn", "model.windw=3"], "did you mean model.window?"),
    ],
)
def test_cli_refuses_bad_configuration_before_work(argv, match, tmp_path, capsys):
    out = tmp_path / "never"
    assert main(["train", *argv, "--out", str(out)]) == 2
    assert match in capsys.readouterr().err
    assert not out.exists()


def test_help_lists_tasks_and_models():
    proc = subprocess.run([sys.executable, "-m", "ctrlrnn", "train", "--help"],
                          capture_output=True, text=True, check=True)
    for word in ("copy", "addition", "sort", "tree-traversal", "qrnn", "lstm", "metagross"):
        assert word in proc.stdout


def test_copy_run_writes_checkpoint_log_report_and_plot(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    code = main(["train", "--task", "copy", "--model", "qrnn", "--max-steps", "30", "--epochs", "5",
                 "--out", str(out), "--no-progress", "model.hidden_size=16",
                 "task.train_size=320", "task.valid_size=32", "task.test_size=32",
                 "batch_size=32", "eval_every=15"])
    assert code == 0
    for name in ("checkpoint.safetensors", "best.safetensors", "log.jsonl", "log.csv",
                 "report.md", "curves.png", "result.json"):
        assert (out / name).is_file(), name
    rows = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
    train = [r for r in rows if r.get("split") == "train"]
    assert train[-1]["step"] == 30 and train[0]["loss"] > train[-1]["loss"]
    report = (out / "report.md").read_text()
    assert "exact_match" in report and "curves.png" in report
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = capsys.readouterr().out
    result = json.loads((out / "result.json").read_text())  # fractions, for programs
    shown = f"{100 * result['test']['exact_match']:.2f}%"  # percent, for people
    assert f"exact_match {shown}" in printed and shown in report
    assert printed.startswith("step 30 (best validation exact_match at step ")
    code = main(["eval", "--checkpoint", str(out / "best.safetensors"), "--split", "valid"])
    assert code == 0
    assert f"exact_match {100 * result['valid']['exact_match']:.2f}%" in capsys.readouterr().out
    assert main(["eval", "--checkpoint", str(out / "best.safetensors"), "--split", "valid",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["exact_match"] == result["valid"]["exact_match"]
    assert main(["eval", "--checkpoint", str(out / "best.safetensors"), "--split", "valid",
                 "--json", "--device", "cpu"]) == 0
    assert json.loads(capsys.readouterr().out)["exact_match"] == result["valid"]["exact_match"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["eval", "--checkpoint", str(out / "best.safetensors"), "--device", "cuda"]) == 2
    assert "device: cuda was asked for, but torch sees no CUDA" in capsys.readouterr().err
