"""``precision=bf16|fp16`` of ``ctrlrnn train``: each training step's forward pass under
``torch.autocast``, the weights, gradients and optimizer in float32, evaluations in float32;
fp16's gradient scaler is stored with the checkpoint and restored on resume; a precision that
cannot run here is one line naming the key.

Whether torch's ``nn.LSTM`` runs under CPU autocast depends on the CPU (oneDNN has no bfloat16
LSTM on an AVX2-only CPU): the tests ask the machine through the probe the trainer asks
(:func:`ctrlrnn.train.precision.lstm_autocast_error`), and expect a run where it passes and the
one-line refusal where it fails. An AVX2-only CPU is also reproduced on any x86 machine by
capping oneDNN's instruction sets (``ONEDNN_MAX_CPU_ISA=AVX2``) in a fresh process."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from ctrlrnn.cli import main
from ctrlrnn.models.encoders import encoder_options
from ctrlrnn.nn.registry import UNITS
from ctrlrnn.tasks import task_class
from ctrlrnn.train import precision as precision_mod
from ctrlrnn.train.checkpoint import Checkpoint
from ctrlrnn.train.cli import seed_everything
from ctrlrnn.train.config import ConfigError, check_options, load_config
from ctrlrnn.train.config_changes import config_differences
from ctrlrnn.train.precision import MixedPrecision, lstm_autocast_error
from ctrlrnn.train.trainer import Trainer

COPY = {"task.train_size": 96, "task.valid_size": 16, "task.test_size": 16, "task.digits": 3,
        "model.hidden_size": 12, "batch_size": 16, "log_every": 1, "checkpoint_every": 2}


pytestmark = pytest.mark.usefixtures("one_thread")


CPU = torch.device("cpu")


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


def _lstm_modules(model: str) -> list[str]:
    """The names of the ``torch.nn.LSTM`` modules of the copy task's model for ``--model
    model`` (its decoder is one for every encoder but the QRNN)."""
    cls = task_class("copy")
    task = cls(check_options("task", "copy", {k[5:]: v for k, v in COPY.items()
                                              if k.startswith("task.")}, cls.options), 0)
    task.setup()
    built = task.build_model(model, encoder_options(model, {"hidden_size": 12}))
    return [name for name, m in built.named_modules() if isinstance(m, torch.nn.LSTM)]


def _refusal(precision: str, module: str) -> str:
    """The pattern of the one-line refusal of ``precision`` for a model whose ``nn.LSTM`` is
    ``module``: what stopped, where, and what to use instead, never ``precision`` itself."""
    return (rf"^precision: {precision} autocast cannot run torch\.nn\.LSTM on cpu with torch "
            rf"\S+ \([^()]+\), and the model holds one \(its module Seq2Seq\.{module}\); use "
            rf"precision=fp32(?!.*precision={precision})")


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
    """Every model trains in bf16 where torch's LSTM runs under bf16 autocast here; where it
    does not (an AVX2-only CPU), a model holding one is refused in one line."""
    lstms = _lstm_modules(model)
    if lstms and lstm_autocast_error(CPU, torch.bfloat16) is not None:
        with pytest.raises(ConfigError, match=_refusal("bf16", lstms[0])):
            _trainer(tmp_path / "run", model, precision="bf16", max_steps=4)
        return
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
    """CPU float16 autocast of torch.nn.LSTM stops in oneDNN where the CPU has no float16 LSTM;
    where this torch can run it the run trains instead."""
    if lstm_autocast_error(CPU, torch.float16) is not None:
        with pytest.raises(ConfigError, match=_refusal("fp16", "encoder.rnn")):
            _trainer(tmp_path / "run", "lstm", precision="fp16", max_steps=1)
        return
    assert _trainer(tmp_path / "run", "lstm", precision="fp16", max_steps=1).fit()["step"] == 1


@pytest.mark.parametrize(("precision", "missing", "advice"), [
    ("bf16", ("bf16", "fp16"), "precision=fp32, or"),
    ("fp16", ("bf16", "fp16"), "precision=fp32, or"),
    ("fp16", ("fp16",), "precision=fp32 or precision=bf16, or"),
    ("bf16", ("bf16",), "precision=fp32 or precision=fp16, or"),
])  # fmt: skip
def test_the_refusal_names_only_precisions_that_run_here(tmp_path, monkeypatch, precision,
                                                         missing, advice):  # fmt: skip
    """The advice follows the probe's answers: the other precisions under which torch's LSTM
    runs, float32 always, never the refused one; and the ctrlrnn units that run in the refused
    precision (every registered one runs under CPU autocast)."""
    for name in ("bf16", "fp16"):
        answer = "no LSTM primitive for this dtype" if name in missing else None
        monkeypatch.setitem(precision_mod._LSTM_PROBES, ("cpu", precision_mod.PRECISIONS[name]),
                            answer)
    with pytest.raises(ConfigError) as refused:
        _trainer(tmp_path / "run", "lstm", precision=precision, max_steps=1)
    line = str(refused.value)
    assert "\n" not in line
    assert line.startswith(f"precision: {precision} autocast cannot run torch.nn.LSTM on cpu "
                           f"with torch {torch.__version__} (no LSTM primitive for this dtype), "
                           "and the model holds one (its module Seq2Seq.encoder.rnn); use ")
    assert line.endswith(f"use {advice} a model with no torch.nn.LSTM in it (of ctrlrnn's units, "
                         f"{', '.join(UNITS)} run in {precision} on this cpu)")


#: a tiny ``ctrlrnn train`` run of the copy task whose decoder is a torch.nn.LSTM
AVX2_RUN = ["--task", "copy", "--model", "caslstm", "--no-progress", "max_steps=2",
            "batch_size=8", "model.hidden_size=8", "task.train_size=16", "task.valid_size=8",
            "task.test_size=8", "task.digits=2", "eval_every=0"]
#: oneDNN kept to AVX2, as on an AVX2-only CPU (both names oneDNN reads)
AVX2_ONLY = {"ONEDNN_MAX_CPU_ISA": "AVX2", "DNNL_MAX_CPU_ISA": "AVX2", "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def avx2_probe() -> dict[str, str | None]:
    """The probe's answer for bf16 and fp16 in a fresh process with oneDNN kept to AVX2."""
    code = ("import json, torch; from ctrlrnn.train.precision import lstm_autocast_error as e; "
            "print(json.dumps({n: e(torch.device('cpu'), d) for n, d in "
            "(('bf16', torch.bfloat16), ('fp16', torch.float16))}))")
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, **AVX2_ONLY},
                          capture_output=True, text=True, timeout=300, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_ctrlrnn_train_on_an_avx2_only_cpu_trains_or_refuses_in_one_line(tmp_path, precision,
                                                                         avx2_probe):
    """With oneDNN kept to AVX2 (no bfloat16 or float16 LSTM primitive), ``ctrlrnn train`` of a
    model holding a torch.nn.LSTM either trains (where the probe finds the LSTM runs, as on a
    CPU the cap does not concern) or exits 2 with one line: the key, what cannot run, and what
    to use instead."""
    done = subprocess.run([sys.executable, "-m", "ctrlrnn", "train", *AVX2_RUN,
                           "--out", str(tmp_path / "run"), f"precision={precision}"],
                          env={**os.environ, **AVX2_ONLY}, capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    if avx2_probe[precision] is None:
        assert done.returncode == 0, done.stderr
        return
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert re.match(_refusal(precision, "rnn"), lines[0].removeprefix("ctrlrnn train: "))
    assert f"({avx2_probe[precision]})" in lines[0]
