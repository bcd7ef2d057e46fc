"""Faults a run meets: a log without a checkpoint, a full disk, numbers that are not finite
(in the configuration, the loss or the parameters), and JSON files strict readers accept."""

from __future__ import annotations

import contextlib
import errno
import io
import json
import math
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch

from ctrlrnn import cli
from ctrlrnn.train import checkpoint as checkpoint_mod
from ctrlrnn.train.checkpoint import Checkpoint

ARGS = [
    "--task", "copy", "--model", "qrnn", "--epochs", "50", "--no-progress",
    "model.hidden_size=8", "task.train_size=128", "task.valid_size=32", "task.test_size=32",
    "task.digits=3", "batch_size=32", "checkpoint_every=2", "log_every=1", "eval_every=0",
]


def _train_here(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """``ctrlrnn train`` in this process, its stdout and stderr captured."""
    err, printed = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(printed):
        code = cli.main(["train", *ARGS, "--out", str(out), *extra])
    return subprocess.CompletedProcess([], code, printed.getvalue(), err.getvalue())


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def _strict(text: str) -> Any:
    """``json.loads`` that refuses NaN and the infinities, as strict JSON readers do."""
    def refuse(word: str) -> Any:
        raise ValueError(f"not JSON: {word}")

    return json.loads(text, parse_constant=refuse)


def _rows(out: Path) -> list[dict[str, Any]]:
    return [_strict(line) for line in (out / "log.jsonl").read_text().splitlines() if line]


def _train_steps(out: Path) -> list[int]:
    return [r["step"] for r in _rows(out) if r.get("split") == "train"]


def _csv_train_steps(out: Path) -> list[int]:
    import csv

    with open(out / "log.csv", newline="") as fh:
        return [int(r["step"]) for r in csv.DictReader(fh) if r.get("split") == "train"]


def _finite_parameters(path: Path) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in Checkpoint(path).model_state().values()
               if t.is_floating_point())


class _Killed(BaseException):
    """Stands for the process dying (not an ``Exception``: nothing catches it on the way)."""


# ---------------------------------------------------------------- a log without a checkpoint
@pytest.mark.parametrize("again", [[], ["--resume"]])
def test_a_run_killed_before_its_first_checkpoint_logs_each_step_once(tmp_path, monkeypatch,
                                                                       again):
    out = tmp_path / "run"

    def killed(*args: Any, **kwargs: Any) -> None:
        raise _Killed

    monkeypatch.setattr(checkpoint_mod, "save_file", killed)  # dies writing its first one
    with pytest.raises(_Killed):
        _train_here(out, "--max-steps", "6")
    assert _train_steps(out) == [1, 2]
    assert not (out / "checkpoint.safetensors").exists()
    monkeypatch.undo()

    run = _train_here(out, "--max-steps", "6", *again)
    assert run.returncode == 0, run.stderr
    assert _train_steps(out) == [1, 2, 3, 4, 5, 6]
    assert _csv_train_steps(out) == [1, 2, 3, 4, 5, 6]
    assert "2 row(s) dropped" in run.stderr


def test_a_resumed_run_drops_the_rows_past_its_checkpoint(tmp_path, monkeypatch):
    out = tmp_path / "run"
    calls = {"n": 0}
    real = checkpoint_mod.save_file

    def dies_at_the_second(*args: Any, **kwargs: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise _Killed
        real(*args, **kwargs)

    monkeypatch.setattr(checkpoint_mod, "save_file", dies_at_the_second)
    with pytest.raises(_Killed):
        _train_here(out, "--max-steps", "8")
    assert _train_steps(out) == [1, 2, 3, 4]  # the checkpoint holds step 2
    monkeypatch.undo()
    run = _train_here(out, "--max-steps", "8", "--resume")
    assert run.returncode == 0, run.stderr
    assert _train_steps(out) == list(range(1, 9))
    assert _csv_train_steps(out) == list(range(1, 9))


# ---------------------------------------------------------------- a full disk
def _safetensors_disk_full(*args: Any, **kwargs: Any) -> None:
    from safetensors import SafetensorError

    # as safetensors words it on a full tmpfs
    raise SafetensorError("Error while serializing: I/O error: No space left on device (os "
                          "error 28)")


def _oserror_disk_full(*args: Any, **kwargs: Any) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("raise_it", [_safetensors_disk_full, _oserror_disk_full])
def test_a_full_disk_at_a_checkpoint_is_one_line_and_loses_nothing(tmp_path, monkeypatch,
                                                                    raise_it):
    out = tmp_path / "run"
    assert _train_here(out, "--max-steps", "2").returncode == 0
    latest = out / "checkpoint.safetensors"
    before = latest.read_bytes()
    monkeypatch.setattr(checkpoint_mod, "save_file", raise_it)
    full = _train_here(out, "--max-steps", "6", "--resume")
    assert full.returncode != 0
    stderr = "\n".join(line for line in full.stderr.splitlines()
                       if not line.startswith("resume: "))
    assert _one_line(stderr) == f"ctrlrnn: no space left on device while writing {latest}"
    assert latest.read_bytes() == before  # the step-2 checkpoint, whole
    assert not list(out.glob(".*.tmp"))
    monkeypatch.undo()
    resumed = _train_here(out, "--max-steps", "6", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert _train_steps(out) == [1, 2, 3, 4, 5, 6]


def test_a_full_disk_writing_the_log_is_one_line(tmp_path, monkeypatch):
    from ctrlrnn.train import logs

    out = tmp_path / "run"
    real = logs.os.replace

    def full(src: Any, dst: Any) -> None:
        if str(dst).endswith("log.csv"):
            raise OSError(errno.ENOSPC, "No space left on device")
        real(src, dst)

    monkeypatch.setattr(logs.os, "replace", full)
    run = _train_here(out, "--max-steps", "4")
    assert run.returncode != 0
    assert _one_line(run.stderr) == (
        f"ctrlrnn: no space left on device while writing {out / 'log.csv'}")
    assert not list(out.glob(".*.tmp"))


def test_a_full_disk_is_named_by_the_file_being_written(tmp_path):
    from ctrlrnn import files

    target = tmp_path / "run" / "result.json"
    full = os.strerror(errno.ENOSPC)
    with pytest.raises(files.NoSpaceLeft) as caught, files.writing(target):
        raise OSError(errno.ENOSPC, full, str(tmp_path / "run" / ".result.json.7.tmp"))
    assert caught.value.filename == str(target)  # not the temporary file beside it
    elsewhere = tmp_path / "work" / "raw.zip"  # a work folder, maybe on another device
    with pytest.raises(files.NoSpaceLeft) as caught, files.writing(target):
        raise OSError(errno.ENOSPC, full, str(elsewhere))
    assert caught.value.filename == str(elsewhere)
    with pytest.raises(PermissionError), files.writing(target):
        raise PermissionError(errno.EACCES, "denied")
    try:
        try:
            raise files.NoSpaceLeft(target)
        except OSError as exc:
            raise ValueError(f"cannot save: {exc}") from exc
    except ValueError as exc:
        assert files.is_no_space(exc)
        assert files.no_space_line(exc) == (
            f"ctrlrnn: no space left on device while writing {target}")
    assert not files.is_no_space(ValueError("disk fine"))


# ---------------------------------------------------------------- the configuration
@pytest.mark.parametrize("setting,key", [
    ("lr=nan", "lr"), ("weight_decay=nan", "weight_decay"), ("lr=inf", "lr"),
    ("momentum=nan", "momentum"), ("clip_norm=nan", "clip_norm"), ("lr=-inf", "lr"),
    ("model.dropout=nan", "model.dropout"),
])
def test_a_number_that_is_not_finite_is_refused(tmp_path, setting, key):
    out = tmp_path / "never"
    run = _train_here(out, "--max-steps", "2", setting)
    assert run.returncode == 2
    assert _one_line(run.stderr).startswith(f"ctrlrnn train: {key}: expected a finite number")
    assert not out.exists()


@pytest.mark.parametrize("setting,start", [
    ("threads=100000", "ctrlrnn train: threads: expected at most "),
    ("seed=18446744073709551617", "ctrlrnn train: seed: expected an integer from 0 to "),
    ("optimizer=lbfgs", "ctrlrnn train: optimizer: expected one of adam, "),
    ("model.hidden_size=100000000000", "ctrlrnn train: model: qrnn with these options needs "
                                       "more memory than cpu has"),
])
def test_out_of_range_settings_are_one_line(tmp_path, setting, start):
    run = _train_here(tmp_path / "run", "--max-steps", "2", "device=cpu", setting)
    assert run.returncode == 2
    assert _one_line(run.stderr).startswith(start)


def test_seed_option_out_of_range_is_one_line(tmp_path):
    run = _train_here(tmp_path / "never", "--max-steps", "2", "--seed", str(2**64 + 1))
    assert run.returncode == 2
    assert _one_line(run.stderr).startswith("ctrlrnn train: seed: expected an integer from 0 ")


def test_threads_limit_follows_the_cpus(monkeypatch):
    from ctrlrnn.train import config

    monkeypatch.setattr(config, "usable_cpus", lambda: 3)
    assert config.load_config(None, {"threads": "12"}).threads == 12
    with pytest.raises(config.ConfigError, match=r"threads: expected at most 12 \(4 per CPU; "
                                                 r"this process may use 3\), got 13"):
        config.load_config(None, {"threads": "13"})


# ---------------------------------------------------------------- non-finite training
def test_a_non_finite_loss_stops_the_run_in_one_line(tmp_path):
    out = tmp_path / "run"
    run = _train_here(out, "--max-steps", "40", "optimizer=sgd", "lr=1e30")
    assert run.returncode == 1
    line = _one_line(run.stderr)
    assert line.startswith("ctrlrnn train: training diverged: the training loss is nan at step ")
    assert run.stdout == ""
    result = _strict((out / "result.json").read_text())
    assert result["stop_reason"] == "diverged" and result["step"] < 40
    assert result["valid"] == {} and result["test"] == {}  # no model was evaluated
    assert not (out / "best.safetensors").exists()
    if (out / "checkpoint.safetensors").exists():
        assert _finite_parameters(out / "checkpoint.safetensors")
    _rows(out)  # strict JSON throughout


@pytest.mark.parametrize("checkpoint_every", ["1", "2"])
def test_a_resumed_run_that_diverges_keeps_its_finite_checkpoint(tmp_path, checkpoint_every):
    out = tmp_path / "run"
    setting = ["optimizer=sgd", f"checkpoint_every={checkpoint_every}"]
    assert _train_here(out, "--max-steps", "4", "lr=0.1", *setting).returncode == 0
    latest, best = out / "checkpoint.safetensors", out / "best.safetensors"
    kept = {p: p.read_bytes() for p in (latest, best)}

    refused = _train_here(out, "--max-steps", "8", "--resume", "--override", "lr=inf", *setting)
    assert refused.returncode == 2
    assert _one_line(refused.stderr).startswith("ctrlrnn train: lr: expected a finite number")

    run = _train_here(out, "--max-steps", "8", "--resume", "--override", "lr=1e30", *setting)
    assert run.returncode == 1
    lines = [line for line in run.stderr.splitlines() if not line.startswith("resume: ")]
    line = _one_line("\n".join(lines))
    step = int(Checkpoint(latest).progress["step"])
    assert f"{latest} holds step {step}, the last finite state" in line
    assert line.endswith(" --resume --override lr=LOWER") and "lr=1e30" not in line
    assert _finite_parameters(latest) and _finite_parameters(best)
    assert best.read_bytes() == kept[best]
    if checkpoint_every == "2":  # the loss of step 6 is the first non-finite value
        assert step == 4 and latest.read_bytes() == kept[latest]
    result = _strict((out / "result.json").read_text())
    assert result["stop_reason"] == "diverged" and result["best_step"] is not None
    assert all(math.isfinite(v) for v in result["valid"].values())  # the best checkpoint's


def test_a_model_that_turns_non_finite_is_never_evaluated_or_saved(tmp_path, monkeypatch):
    """Poisoned parameters after a step whose loss was finite: caught before the evaluation
    and the checkpoint of that step."""
    from ctrlrnn.train import trainer

    real = trainer.training_step

    def poisons_at_step_2(task, model, optimizer, params, batch, clip_norm, ctx=None,
                          **precision):
        loss = real(task, model, optimizer, params, batch, clip_norm, ctx, **precision)
        poisons_at_step_2.calls += 1
        if poisons_at_step_2.calls == 2:
            with torch.no_grad():
                params[0].fill_(float("nan"))
        return loss

    poisons_at_step_2.calls = 0
    monkeypatch.setattr(trainer, "training_step", poisons_at_step_2)
    out = tmp_path / "run"
    run = _train_here(out, "--max-steps", "8", "eval_every=2")
    assert run.returncode == 1
    assert "the parameter " in run.stderr and "is not finite after step 2" in run.stderr
    assert "no checkpoint had been written" in _one_line(run.stderr)
    assert not (out / "checkpoint.safetensors").exists()
    assert not (out / "best.safetensors").exists()
    assert not [r for r in _rows(out) if r.get("split") == "valid"]


# ---------------------------------------------------------------- strict JSON
def test_json_files_are_strict(tmp_path):
    from ctrlrnn import files
    from ctrlrnn.train.logs import RunLog
    from ctrlrnn.train.report import write_report

    out = tmp_path / "run"
    log = RunLog(out)
    log.write({"step": 1, "split": "train", "loss": float("nan"), "lr": float("inf")})
    log.truncate_after(1)
    result = {"step": 1, "epochs_completed": 0, "train_seconds": 1.0, "best_step": 1,
              "metric": "loss", "valid": {"loss": float("nan"), "ppl": float("-inf")},
              "test": {"loss": float("inf")}, "cpu_share": None}
    write_report(out, config={"task": "copy", "model": "qrnn", "lr": float("nan")},
                 result=result, data={}, model_info={}, rows=log.rows())
    stored = _strict((out / "result.json").read_text())
    assert stored["valid"] == {"loss": None, "ppl": None} and stored["test"] == {"loss": None}
    assert _rows(out) == [{"step": 1, "split": "train", "loss": None, "lr": None}]
    assert files.dumps({"a": (1.5, float("nan")), "b": [float("inf")]}) == (
        '{"a": [1.5, null], "b": [null]}')


def test_every_json_writer_in_the_package_is_strict():
    """Every ``json.dump``/``json.dumps`` call in ``src/ctrlrnn`` passes ``allow_nan=False``
    or goes through :mod:`ctrlrnn.files`, but for the checkpoint metadata digest (which must
    reproduce the digests of files written before)."""
    import ast

    import ctrlrnn

    root = Path(ctrlrnn.__file__).parent
    allowed = {("train/checkpoint.py", "metadata_digest")}

    class Calls(ast.NodeVisitor):
        def __init__(self, file: str) -> None:
            self.file, self.within, self.loose = file, ["<module>"], []

        def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
            self.within.append(node.name)
            self.generic_visit(node)
            self.within.pop()

        def visit_Call(self, node: ast.Call) -> None:
            f = node.func
            if (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
                    and f.value.id == "json" and f.attr in ("dump", "dumps")):
                strict = any(k.arg == "allow_nan" and isinstance(k.value, ast.Constant)
                             and k.value.value is False for k in node.keywords)
                if not strict and (self.file, self.within[-1]) not in allowed:
                    self.loose.append(f"{self.file}:{node.lineno}")
            self.generic_visit(node)

    loose: list[str] = []
    for path in sorted(root.rglob("*.py")):
        calls = Calls(str(path.relative_to(root)))
        calls.visit(ast.parse(path.read_text(encoding="utf-8")))
        loose += calls.loose
    assert not loose, "json.dump(s) without allow_nan=False: " + ", ".join(loose)


def test_files_replaced_whole_keep_the_usual_permissions(tmp_path):
    """result.json, report.md and log.csv are written under a temporary name and renamed: a
    new one gets the umask's permissions, a replaced one keeps its own."""
    run = _train_here(tmp_path / "run", "--max-steps", "2")
    assert run.returncode == 0, run.stderr
    umask = os.umask(0)
    os.umask(umask)
    for name in ("result.json", "report.md", "log.csv"):
        assert (tmp_path / "run" / name).stat().st_mode & 0o777 == 0o666 & ~umask, name
    (tmp_path / "run" / "result.json").chmod(0o600)
    assert _train_here(tmp_path / "run", "--max-steps", "4", "--resume").returncode == 0
    assert (tmp_path / "run" / "result.json").stat().st_mode & 0o777 == 0o600
