"""The gate figures: recorded into the results file when the seed-0 run is trained, then
drawn from the results file alone (no checkpoint needed), or a note where none is recorded."""

from __future__ import annotations

import json
import random
import shutil

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


def _quiet(_line):
    return None


def test_depth_gates_recorded_then_drawn_without_runs(tmp_path, monkeypatch):
    data = _pixels(tmp_path / "px", {"train": 64, "valid": 16, "test": 16})
    exp = Experiment(
        id="tiny-pixels", paper="metagross", title="tiny", task="mnist-5k", metric="accuracy",
        higher_is_better=True, arms=(Arm("METAGROSS", "metagross", {"hidden_size": 4}),),
        claims=(), quick={"max_steps": 2, "epochs": 1, "batch_size": 32},
        full={}, task_args={"source": str(data)}, seeds_quick=1,
    )
    runs, results, docs = tmp_path / "runs", tmp_path / "results", tmp_path / "docs"
    docs.mkdir()
    monkeypatch.setattr(figures, "FIGURE_ARMS", {"tiny-pixels": ("depth_gates", "METAGROSS"),
                                                 "never-run": ("depth_gates", "METAGROSS")})
    runner.run_experiment(exp, "quick", runs, results, show_progress=False, log=_quiet)
    stored = json.loads((results / "quick" / "tiny-pixels.json").read_text())["figures"]
    assert stored["kind"] == "depth_gates" and len(stored["alpha_sequence"]) == 16
    assert all(0.0 <= v <= 1.0 for v in stored["mean"].values())
    shutil.rmtree(runs)  # the page needs the results file only
    lines = "\n".join(figures.depth_gate_section("quick", results, docs))
    assert f"mean alpha {stored['mean']['alpha_init']:.3f}" in lines
    png = docs / "metagross-depth-gates-tiny-pixels-quick.png"
    assert png.read_bytes()[:4] == b"\x89PNG"
    first = png.read_bytes()
    again = "\n".join(figures.depth_gate_section("quick", results, docs))
    assert again == lines and png.read_bytes() == first  # the same page and picture each time
    assert "`never-run`: its results file records no depth-gate statistics" in lines
    assert "--rerun never-run" in lines


def test_vertical_gate_recorded_then_drawn_without_runs(tmp_path, monkeypatch):
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
    runs, results, docs = tmp_path / "runs", tmp_path / "results", tmp_path / "docs"
    docs.mkdir()
    monkeypatch.setattr(figures, "FIGURE_ARMS",
                        {"tiny-sst": ("vertical_gate", "2-layer CAS-LSTM")})
    lines = "\n".join(figures.cas_gate_section("quick", results, docs))
    assert "`tiny-sst`: its results file records no vertical-gate statistics" in lines
    runner.run_experiment(exp, "quick", runs, results, show_progress=False, log=_quiet)
    stored = json.loads((results / "quick" / "tiny-sst.json").read_text())["figures"]
    assert len(stored["histogram"]) == figures.HISTOGRAM_BINS
    assert sum(stored["histogram"]) == stored["values"] > 0
    shutil.rmtree(runs)
    lines = "\n".join(figures.cas_gate_section("quick", results, docs))
    assert f"mean {stored['mean']:.3f}" in lines
    assert (docs / "cas-lstm-vertical-gate-quick.png").read_bytes()[:4] == b"\x89PNG"
