"""``precision=bf16|fp16`` of ``ctrlrnn train``: each training step's forward pass under
``torch.autocast``, the weights, gradients and optimizer in float32, evaluations in float32;
fp16's gradient scaler is stored with the checkpoint and restored on resume; a precision that
cannot run here is one line naming the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from ctrlrnn.cli import main
from ctrlrnn.models.encoders import encoder_options
from ctrlrnn.tasks import task_class
from ctrlrnn.train.checkpoint import Checkpoint
from ctrlrnn.train.cli import seed_everything
from ctrlrnn.train.config import ConfigError, check_options, load_config
from ctrlrnn.train.config_changes import config_differences
from ctrlrnn.train.precision import MixedPrecision
from ctrlrnn.train.trainer import Trainer

COPY = {"task.train_size": 96, "task.valid_size": 16, "task.test_size": 16, "task.digits": 3,
        "model.hidden_size": 12, "batch_size": 16, "log_every": 1, "checkpoint_every": 2}


pytestmark = pytest.mark.usefixtures("one_thread")


def _trainer(out: Path, model: str, **overrides: Any) -> Trainer:
    """A copy-task run as ``ctrlrnn train`` builds it, not started."""
    cls = task_class("copy")
    cfg = load_config(None, {"task": "copy", "model": model, "out": str(out), **COPY,
                             **overrides}, base=dict(cls.defaults))  # fmt: skip
    cfg.task_args = check_options("task", "copy", cfg.task_args, cls.options)
    cfg.model_args = encoder_options(model, cfg.model_args)
    seed_everything(cfg.seed)
    task = cls(cfg.task_args, cfg.seed)
    task.setup()
    return Trainer(cfg, task, task.build_model(model, cfg.model_args), out,
                   show_progress=False)


def _record_autocast(trainer: Trainer) -> list[tuple[str, torch.dtype | None]]:
    """(``"train"`` or ``"eval"``, the autocast dtype, None when off) of every training loss
    and evaluation the run computes."""
    seen: list[tuple[str, torch.dtype | None]] = []
    task = trainer.task
    loss, evaluate = task.loss, task.evaluate

    def now(phase: str) -> None:
        on = torch.is_autocast_enabled("cpu")
        seen.append((phase, torch.get_autocast_dtype("cpu") if on else None))

    def recorded_loss(*args: Any, **kwargs: Any) -> torch.Tensor:
        now("train")
        return loss(*args, **kwargs)

    def recorded_evaluate(*args: Any, **kwargs: Any) -> dict[str, float]:
        now("eval")
        return evaluate(*args, **kwargs)

    task.loss, task.evaluate = recorded_loss, recorded_evaluate  # type: ignore[method-assign]
    return seen


@pytest.mark.parametrize("model", ["qrnn", "metagross", "caslstm"])
def test_bf16_trains_under_autocast_and_evaluates_in_float32(tmp_path, model):
    trainer = _trainer(tmp_path / "run", model, precision="bf16", max_steps=4)
    seen = _record_autocast(trainer)
    result = trainer.fit()
    assert {dtype for phase, dtype in seen if phase == "train"} == {torch.bfloat16}
    assert {dtype for phase, dtype in seen if phase == "eval"} == {None}
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())
    assert result["step"] == 4 and all(v == v for v in result["test"].values())  # no NaN
    stored = Checkpoint(tmp_path / "run" / "checkpoint.safetensors")
    assert stored.config["precision"] == "bf16" and "grad_scaler" not in stored.progress


def test_fp32_is_the_default_and_keeps_every_step_in_float32(tmp_path):
    trainer = _trainer(tmp_path / "run", "qrnn", max_steps=2)
    seen = _record_autocast(trainer)
    trainer.fit()
    assert trainer.cfg.precision == "fp32" and {d for _, d in seen} == {None}


def test_fp16_scales_the_loss_and_its_scaler_survives_a_resume(tmp_path):
    out = tmp_path / "run"
    trainer = _trainer(out, "qrnn", precision="fp16", max_steps=3)
    seen = _record_autocast(trainer)
    trainer.fit()
    assert {dtype for phase, dtype in seen if phase == "train"} == {torch.float16}
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())
    stored = Checkpoint(out / "checkpoint.safetensors").progress["grad_scaler"]
    assert stored == trainer.precision.scaler.state_dict()
    # three steps: every step either grew the tracker or backed off the scale
    assert stored["_growth_tracker"] > 0 or stored["scale"] < 2.0**16
    resumed = _trainer(out, "qrnn", precision="fp16", max_steps=5)
    resumed.fit(resume=True)
    straight = _trainer(tmp_path / "straight", "qrnn", precision="fp16", max_steps=5)
    straight.fit()
    assert resumed.progress["step"] == straight.progress["step"] == 5
    # the resumed scaler went on from the stored one (a fresh one would count 2 steps, not 5)
    assert resumed.precision.state() == straight.precision.state()
    fresh = MixedPrecision("fp16", torch.device("cpu")).state()
    assert straight.precision.state() != fresh


def test_a_resumed_run_keeps_its_precision_unless_overridden():
    assert not config_differences({"lr": 0.1}, {"lr": 0.1, "precision": "fp32"})  # older runs
    assert config_differences({"precision": "fp32"}, {"precision": "bf16"}) == {
        "precision": ("fp32", "bf16")}
    assert not config_differences({"precision": "fp32"}, {"precision": "bf16"},
                                  accept=frozenset({"precision"}))


def test_an_unknown_precision_is_one_line_naming_the_key(tmp_path, capsys):
    code = main(["train", "--task", "copy", "--model", "qrnn", "--out", str(tmp_path / "r"),
                 "--no-progress", "precision=fp8"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0
    assert "precision: expected one of fp32, bf16, fp16, got 'fp8'" in err


def test_fp16_with_torchs_lstm_is_refused_where_torch_cannot_run_it(tmp_path):
    """CPU float16 autocast of torch.nn.LSTM stops in oneDNN on the CPUs tried; where this
    torch can run it the run trains instead."""
    probe = torch.nn.LSTM(2, 2, batch_first=True)
    try:
        with torch.autocast("cpu", dtype=torch.float16):
            probe(torch.randn(1, 2, 2))
    except RuntimeError:
        with pytest.raises(ConfigError, match=r"^precision: fp16 autocast cannot run "
                                              r"torch\.nn\.LSTM on cpu .* use bf16 or a GPU$"):
            _trainer(tmp_path / "run", "lstm", precision="fp16", max_steps=1)
        return
    assert _trainer(tmp_path / "run", "lstm", precision="fp16", max_steps=1).fit()["step"] == 1
