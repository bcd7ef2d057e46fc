"""A language-model run resumed after a crash continues the same BPTT stream exactly."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file
from task_helpers import write_text_dir

from ctrlrnn.models.encoders import encoder_options
from ctrlrnn.tasks import task_class
from ctrlrnn.train.cli import seed_everything
from ctrlrnn.train.config import check_options, load_config
from ctrlrnn.train.trainer import Trainer


def _trainer(data, out, encoder, fail_at=None):
    cls = task_class("ptb-lm")
    cfg = load_config(None, {"task": "ptb-lm", "model": encoder, "out": str(out),
                             "max_steps": 8, "epochs": 20, "batch_size": 2, "log_every": 1,
                             "checkpoint_every": 3, "eval_every": 0, "eval_batches": 2,
                             "task.source": str(data), "task.bptt": 4,
                             "model.hidden_size": 8, "model.num_layers": 2},
                      base=dict(cls.defaults))
    cfg.task_args = check_options("task", "ptb-lm", cfg.task_args, cls.options)
    cfg.model_args = encoder_options(encoder, cfg.model_args)
    seed_everything(cfg.seed)
    task = cls(cfg.task_args, cfg.seed)
    task.setup()
    if fail_at is not None:
        calls = {"n": 0}
        original = task.loss

        def failing(model, batch):
            calls["n"] += 1
            if calls["n"] == fail_at:
                raise RuntimeError("simulated crash")
            return original(model, batch)

        task.loss = failing
    model = task.build_model(encoder, cfg.model_args)
    return Trainer(cfg, task, model, out, show_progress=False)


@pytest.mark.parametrize("encoder", ["lstm", "qrnn"])
def test_resumed_lm_run_equals_uninterrupted(tmp_path, encoder):
    data = write_text_dir(tmp_path / "text", {"train": 60, "valid": 10, "test": 10})
    full = _trainer(data, tmp_path / "full", encoder).fit()
    with pytest.raises(RuntimeError, match="simulated crash"):
        _trainer(data, tmp_path / "cut", encoder, fail_at=5).fit()  # checkpoint at step 3
    resumed = _trainer(data, tmp_path / "cut", encoder).fit(resume=True)
    a = load_file(str(tmp_path / "full" / "checkpoint.safetensors"))
    b = load_file(str(tmp_path / "cut" / "checkpoint.safetensors"))
    for k in (k for k in a if k.startswith("model/")):
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0)
    assert full["valid"] == resumed["valid"] and full["step"] == resumed["step"] == 8
