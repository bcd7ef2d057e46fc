"""The ``device`` key: auto / cpu / cuda / cuda:N, $CTRLRNN_DEVICE, and clear errors for a GPU
that is not there (on this CPU machine, and with CUDA mocked as present)."""

from __future__ import annotations

import pytest
import torch

from ctrlrnn.train import distributed
from ctrlrnn.train.config import ConfigError, load_config
from ctrlrnn.train.distributed import resolve_device


def test_auto_follows_the_environment_then_cuda_availability(monkeypatch):
    monkeypatch.setenv("CTRLRNN_DEVICE", "cpu")
    assert resolve_device("auto") == torch.device("cpu")
    monkeypatch.setenv("CTRLRNN_DEVICE", "auto")  # the same as unset
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    monkeypatch.delenv("CTRLRNN_DEVICE")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("auto") == torch.device("cuda", 0)
    assert resolve_device("auto", local_rank=1) == torch.device("cuda", 1)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    assert resolve_device("cpu") == torch.device("cpu")  # explicit cpu beats a visible GPU


def test_a_missing_gpu_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("CTRLRNN_DEVICE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=r"^device: cuda was asked for, but torch sees no CUDA"):
        resolve_device("cuda")
    monkeypatch.setenv("CTRLRNN_DEVICE", "cuda:0")
    with pytest.raises(ValueError, match=r"device: cuda:0 \(from \$CTRLRNN_DEVICE\)"):
        resolve_device("auto")
    for bad in ("tpu", "cudafoo", "cuda:x", "cuda:"):
        monkeypatch.setenv("CTRLRNN_DEVICE", bad)
        why = rf"device: expected auto, cpu, cuda or cuda:N, got '{bad}' \(from \$CTRLRNN_DEVICE\)"
        with pytest.raises(ValueError, match=why):
            resolve_device("auto")
    with pytest.raises(ValueError, match=r"device: expected auto, cpu, cuda or cuda:N, got 'gpu'$"):
        resolve_device("gpu")
    # two processes per node on a one-GPU machine: the second rank has no GPU of its own
    monkeypatch.delenv("CTRLRNN_DEVICE")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ValueError, match=r"LOCAL_RANK 1 needs GPU 1, but 1 visible.*device=cpu"):
        resolve_device("auto", local_rank=1)
    with pytest.raises(ValueError, match=r"device: cuda:3 needs GPU 3, but 1 visible"):
        resolve_device("cuda:3")


def test_single_process_context_uses_the_resolved_device(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setenv("CTRLRNN_DEVICE", "cpu")
    assert distributed.init_distributed().device == torch.device("cpu")
    assert distributed.init_distributed("cpu").device == torch.device("cpu")


@pytest.mark.parametrize("bad", ["gpu", "cuda:", "cuda:x", "CPU", ""])
def test_config_refuses_other_device_names(bad):
    with pytest.raises(ConfigError, match=r"^device: expected auto, cpu, cuda or cuda:N"):
        load_config(None, {"task": "copy", "model": "qrnn", "device": bad})


def test_train_on_an_absent_gpu_says_so_in_one_line(tmp_path, capsys, monkeypatch):
    from ctrlrnn.cli import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    rc = main(["train", "--task", "copy", "--model", "qrnn", "--max-steps", "1", "--no-progress",
               "--out", str(tmp_path / "run"), "device=cuda", "model.hidden_size=8",
               "task.train_size=16", "task.valid_size=8", "task.test_size=8"])  # fmt: skip
    err = capsys.readouterr().err
    assert rc != 0
    assert "device: cuda was asked for, but torch sees no CUDA device" in err
    assert "Traceback" not in err
