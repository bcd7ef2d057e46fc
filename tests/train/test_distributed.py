"""torchrun with 2 gloo processes equals 1 process on the same global batch; failures stop."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

ARGS = [
    "train", "--task", "copy", "--model", "qrnn", "--max-steps", "6", "--epochs", "5",
    "--no-progress", "model.hidden_size=16", "task.train_size=128", "task.valid_size=32",
    "task.test_size=32", "task.digits=4", "batch_size=16", "log_every=1", "checkpoint_every=3",
]


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "CTRLRNN_DIST_TIMEOUT": "60"}


def _torchrun(nproc: int, *args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={nproc}", *args]


def _losses(out: Path) -> list[float]:
    rows = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines() if x]
    return [r["loss"] for r in rows if r.get("split") == "train"]


def test_two_processes_equal_one(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    subprocess.run([sys.executable, "-m", "ctrlrnn", *ARGS, "--out", str(one)], check=True,
                   env=_env(), capture_output=True, timeout=600)
    subprocess.run(_torchrun(2, "-m", "ctrlrnn", *ARGS, "--out", str(two)), check=True,
                   env=_env(), capture_output=True, timeout=600)
    l1, l2 = _losses(one), _losses(two)
    assert len(l1) == len(l2) == 6
    torch.testing.assert_close(torch.tensor(l2), torch.tensor(l1), rtol=1e-5, atol=1e-6)
    a = load_file(str(one / "checkpoint.safetensors"))
    b = load_file(str(two / "checkpoint.safetensors"))
    for k in (k for k in a if k.startswith("model/")):
        torch.testing.assert_close(b[k], a[k], rtol=1e-4, atol=1e-5)


def test_failing_rank_stops_the_others(tmp_path):
    script = tmp_path / "fail_rank1.py"
    script.write_text(textwrap.dedent("""
        import os, sys
        from ctrlrnn.tasks.seq2seq_tasks import Seq2SeqTask
        original = Seq2SeqTask.loss
        calls = {"n": 0}
        def failing(self, model, batch):
            calls["n"] += 1
            if os.environ.get("RANK") == "1" and calls["n"] == 3:
                raise RuntimeError("injected failure on rank 1")
            return original(self, model, batch)
        Seq2SeqTask.loss = failing
        from ctrlrnn.cli import main
        sys.exit(main(sys.argv[1:]))
    """))
    args = [a if a != "6" else "40" for a in ARGS]
    start = time.time()
    proc = subprocess.run(_torchrun(2, str(script), *args, "--out", str(tmp_path / "f")),
                          env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "injected failure on rank 1" in proc.stderr + proc.stdout
    assert time.time() - start < 240
