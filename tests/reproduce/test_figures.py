"""The METAGROSS depth-gate figures are drawn from a run's checkpoint (or say it is missing)."""

from __future__ import annotations

import numpy as np

from ctrlrnn.reproduce import figures, runner
from ctrlrnn.reproduce.experiments import Arm, Experiment


def _pixels(root, sizes):
    rng = np.random.default_rng(0)
    root.mkdir(parents=True)
    for split, n in sizes.items():
        labels = rng.integers(0, 10, n).astype(np.int64)
        images = rng.integers(0, 255, (n, 16)).astype(np.uint8)
        np.save(root / f"{split}_images.npy", images)
        np.save(root / f"{split}_labels.npy", labels)
    return root


def test_depth_gate_section(tmp_path, monkeypatch):
    data = _pixels(tmp_path / "px", {"train": 64, "valid": 16, "test": 16})
    exp = Experiment(
        id="tiny-pixels", paper="metagross", title="tiny", task="mnist-5k", metric="accuracy",
        higher_is_better=True, arms=(Arm("METAGROSS", "metagross", {"hidden_size": 4}),),
        claims=(), quick={"max_steps": 2, "epochs": 1, "batch_size": 32},
        full={}, task_args={"source": str(data)}, seeds_quick=1,
    )
    runs, docs = tmp_path / "runs", tmp_path / "docs"
    docs.mkdir()
    runner.run_one(exp, exp.arms[0], 0, "quick", runs, show_progress=False)
    monkeypatch.setattr(figures, "DEPTH_GATE_EXPERIMENTS",
                        {"tiny-pixels": "METAGROSS", "never-run": "METAGROSS"})
    lines = "\n".join(figures.depth_gate_section("quick", runs, docs))
    assert "`tiny-pixels`: mean alpha" in lines
    assert (docs / "metagross-depth-gates-tiny-pixels-quick.png").read_bytes()[:4] == b"\x89PNG"
    assert "`never-run`: no trained METAGROSS run" in lines


def test_cas_gate_section(tmp_path, monkeypatch):
    import random

    rng = random.Random(0)
    data = tmp_path / "sst"
    data.mkdir()
    for split, n in {"train": 64, "valid": 16, "test": 16}.items():
        rows = [f"{rng.randrange(5)}\t{' '.join(f'w{rng.randrange(9)}' for _ in range(5))}\n"
                for _ in range(n)]
        (data / f"{split}.tsv").write_text("".join(rows), encoding="utf-8")
    exp = Experiment(
        id="tiny-sst", paper="cas-lstm", title="tiny", task="sst5", metric="accuracy",
        higher_is_better=True,
        arms=(Arm("2-layer CAS-LSTM", "caslstm", {"hidden_size": 4, "num_layers": 2}),),
        claims=(), quick={"max_steps": 2, "epochs": 1, "batch_size": 32},
        full={}, task_args={"source": str(data)}, seeds_quick=1,
    )
    runs, docs = tmp_path / "runs", tmp_path / "docs"
    docs.mkdir()
    monkeypatch.setattr(figures, "CAS_GATE_EXPERIMENT", ("tiny-sst", "2-layer CAS-LSTM"))
    assert "No trained CAS-LSTM run" in "\n".join(figures.cas_gate_section("quick", runs, docs))
    runner.run_one(exp, exp.arms[0], 0, "quick", runs, show_progress=False)
    lines = "\n".join(figures.cas_gate_section("quick", runs, docs))
    assert "Values of `g` at every valid step" in lines
    assert (docs / "cas-lstm-vertical-gate-quick.png").read_bytes()[:4] == b"\x89PNG"
