"""``ctrlrnn train`` and ``ctrlrnn eval`` on CUDA, as a user runs them: each task model trains a
few steps on the GPU and evaluates (greedy and beam decoding included), its batches moved there
by the trainer and the task (``Task.to_device``), then its checkpoint is evaluated again.
Skipped without a CUDA device and under ``TRITON_INTERPRET=1``; ``scripts/gpu-check`` runs it
natively. The routing itself is tested on the CPU (``tests/tasks/test_task_device.py``)."""

from __future__ import annotations

import json

import pytest
import torch

from ctrlrnn.ops.gpu import interpreting

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or interpreting(),
    reason="needs a CUDA device and native Triton (scripts/gpu-check runs these)",
)

SMALL = ["task.train_size=64", "task.valid_size=16", "task.test_size=16",
         "model.hidden_size=32", "batch_size=16", "eval_batches=1"]


@pytest.mark.parametrize(("task", "model", "extra"), [
    ("addition", "qrnn", ["task.digits=3"]),
    ("addition", "caslstm", ["task.digits=3", "task.beam=2", "model.num_layers=2"]),
    ("sort", "metagross", ["model.gates=state"]),
    ("tree-traversal", "rcrn", []),
    ("carnn-dialog", "carnn", ["task.train_size=32", "task.valid_size=8", "task.test_size=8"]),
])
def test_train_runs_on_cuda(tmp_path, task, model, extra):
    from ctrlrnn.cli import main

    out = tmp_path / "run"
    argv = ["train", "--task", task, "--model", model, "--max-steps", "6", "--no-progress",
            "--out", str(out), "device=cuda", *SMALL, *extra]
    assert main(argv) == 0
    result = json.loads((out / "result.json").read_text())
    assert result["device"].startswith("cuda")
    metric = result["metric"]
    assert result["test"][metric] == result["test"][metric]  # finite, not NaN
    # the checkpoint evaluated again on the GPU, as ``ctrlrnn eval`` does
    assert main(["eval", "--checkpoint", str(out / "best.safetensors"), "--device", "cuda",
                 "--json"]) == 0


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
@pytest.mark.parametrize(("task", "model", "extra"), [
    ("addition", "qrnn", ["task.digits=3"]),
    ("sort", "metagross", ["model.gates=state"]),
    ("tree-traversal", "rcrn", []),
])
def test_mixed_precision_trains_on_cuda(tmp_path, task, model, extra, precision):
    """``precision=bf16|fp16`` on the GPU (Triton kernels and cuDNN under autocast; fp16 with
    its gradient scaler), then a resume that extends the run."""
    from ctrlrnn.cli import main

    out = tmp_path / "run"
    argv = ["train", "--task", task, "--model", model, "--no-progress", "--out", str(out),
            "--epochs", "4", "device=cuda", f"precision={precision}", *SMALL, *extra]
    assert main([*argv, "--max-steps", "4"]) == 0
    assert main([*argv, "--max-steps", "8", "--resume"]) == 0
    result = json.loads((out / "result.json").read_text())
    assert result["step"] == 8 and result["device"].startswith("cuda")
    assert result["test"][result["metric"]] == result["test"][result["metric"]]
