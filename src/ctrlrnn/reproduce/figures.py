"""Analysis figures of the papers, drawn from the reproduction runs' checkpoints.

* cas-lstm.txt figure 4: the distribution of the vertical forget gate ``g`` of CAS-LSTM's
  upper layer on sentences, after training (SST-5-like run);
* metagross.txt figures 2-9: the soft depth gates alpha_t and beta_t of METAGROSS — their mean
  at initialisation and after training (figures 2-6), and along the time steps of one test
  sequence (the dynamic recursion of figures 7-9) — for the pixel-by-pixel experiments.

A figure needs the experiment's METAGROSS run of seed 0 to exist under the runs directory; when
it does not, the section says so instead of drawing anything.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch

from ctrlrnn.reproduce.runner import slug

#: (experiment id, its CAS-LSTM arm label) for figure 4
CAS_GATE_EXPERIMENT = ("cas-sst5", "2-layer CAS-LSTM")
#: experiment id -> its METAGROSS arm label
DEPTH_GATE_EXPERIMENTS = {"metagross-mnist": "METAGROSS", "metagross-fashion": "METAGROSS"}


def _model_and_batch(run_dir: Path) -> tuple[Any, Any, Any, dict[str, Any]] | None:
    """(task, initial model, trained model, a batch of 64 training sequences) rebuilt from a
    run's best checkpoint; the initial model has the run's own initialisation."""
    from ctrlrnn.train.cli import rebuild_from_checkpoint

    best = run_dir / "best.safetensors"
    if not best.exists():
        return None
    _cfg, task, initial, ckpt = rebuild_from_checkpoint(best)
    trained = copy.deepcopy(initial)
    ckpt.restore(trained, rng=False)
    return task, initial.eval(), trained.eval(), task.train_batches(0, 64)[0]


def _gates(model: Any, pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """alpha, beta of the first METAGROSS layer: ``(B, T)`` for the first internal unit."""
    rnn = model.encoder.rnn
    with torch.no_grad():
        _out, _h, (alpha, beta) = rnn(pixels, return_gates=True)
    return alpha[0, ..., 0], beta[0, ..., 0]


def depth_gate_section(mode: str, runs_dir: Path, docs_dir: Path) -> list[str]:
    """Markdown (and PNGs) for the depth-gate figures; a note where a run is missing."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = ["### Depth gates (figures 2-9)", "",
             "Mean soft depth gates alpha and beta (section 2.1) of the first METAGROSS layer "
             "over a batch of 64 training sequences, at initialisation (the run's own seed) "
             "and after training, and along the time steps of one sequence (the dynamic "
             "recursion of figures 7-9).", ""]
    for exp_id, arm in DEPTH_GATE_EXPERIMENTS.items():
        run = runs_dir / mode / exp_id / f"{slug(arm)}-seed0"
        built = _model_and_batch(run)
        if built is None:
            lines += [f"- `{exp_id}`: no trained METAGROSS run at `{run}`.", ""]
            continue
        _task, initial, trained, batch = built
        pixels = batch["pixels"]
        a0, b0 = _gates(initial, pixels)
        a1, b1 = _gates(trained, pixels)
        fig, axes = plt.subplots(1, 2, figsize=(11, 3.4))
        names = ["alpha (init)", "beta (init)", "alpha (trained)", "beta (trained)"]
        means = [float(v.mean()) for v in (a0, b0, a1, b1)]
        axes[0].bar(names, means, color=["#c6d7ea", "#f2d0a9", "#3b6ea5", "#d9822b"])
        axes[0].set_ylim(0, 1)
        axes[0].set_title(f"{exp_id}: mean depth gates")
        axes[0].tick_params(axis="x", labelrotation=15)
        steps = torch.arange(a1.shape[1])
        axes[1].plot(steps, a1[0], lw=0.8, label="alpha (trained)")
        axes[1].plot(steps, b1[0], lw=0.8, label="beta (trained)")
        axes[1].set_ylim(0, 1)
        axes[1].set_xlabel("time step (pixel)")
        axes[1].set_title("dynamic recursion along one sequence")
        axes[1].legend(fontsize=8)
        fig.tight_layout()
        png = docs_dir / f"metagross-depth-gates-{exp_id}-{mode}.png"
        fig.savefig(png, dpi=100)
        plt.close(fig)
        spread = float(a1[0].std())
        lines += [f"`{exp_id}`: mean alpha {means[0]:.3f} -> {means[2]:.3f}, mean beta "
                  f"{means[1]:.3f} -> {means[3]:.3f} (init -> trained); alpha's standard "
                  f"deviation along the sequence after training: {spread:.4f}.", "",
                  f"![depth gates {exp_id}]({png.name})", ""]
    return lines


def cas_gate_section(mode: str, runs_dir: Path, docs_dir: Path) -> list[str]:
    """Markdown (and a PNG) for the vertical forget-gate histogram of cas-lstm.txt figure 4."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ctrlrnn.nn.cas_lstm import CASLSTM

    exp_id, arm = CAS_GATE_EXPERIMENT
    lines = ["### Vertical forget gate (figure 4)", ""]
    run = runs_dir / mode / exp_id / f"{slug(arm)}-seed0"
    built = _model_and_batch(run)
    if built is None:
        return lines + [f"No trained CAS-LSTM run at `{run}`.", ""]
    task, _initial, trained, batch = built
    cas = next((m for m in trained.modules() if isinstance(m, CASLSTM)), None)
    if cas is None or cas.num_layers < 2:
        return lines + [f"The run at `{run}` has no CAS-LSTM with two layers.", ""]
    seen: dict[str, Any] = {}

    def capture(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        seen["input"], seen["lengths"] = args[0], kwargs.get("lengths")

    handle = cas.register_forward_pre_hook(capture, with_kwargs=True)
    try:
        with torch.no_grad():
            task.loss(trained, batch)  # the task's own forward, so the hook sees real input
    finally:
        handle.remove()
    (g,) = cas.vertical_gates(seen["input"], seen["lengths"])[:1]
    lengths = seen["lengths"]
    if lengths is not None:
        valid = torch.arange(g.shape[2]).unsqueeze(0) < lengths.cpu().unsqueeze(1)
        values = g[:, valid].flatten()
    else:
        values = g.flatten()
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    ax.hist(values.numpy(), bins=50, range=(0, 1), color="#3b6ea5")
    ax.set_xlabel("vertical forget gate g (layer 2)")
    ax.set_ylabel("count")
    ax.set_title(f"{exp_id}: g over a batch of 64 training sentences", fontsize=9)
    fig.tight_layout()
    png = docs_dir / f"cas-lstm-vertical-gate-{mode}.png"
    fig.savefig(png, dpi=100)
    plt.close(fig)
    q = torch.quantile(values.float(), torch.tensor([0.1, 0.5, 0.9])).tolist()
    return lines + [
        f"Values of `g` at every valid step and unit of layer 2 (`{exp_id}`, seed 0): mean "
        f"{float(values.mean()):.3f}, 10/50/90% quantiles {q[0]:.3f} / {q[1]:.3f} / {q[2]:.3f}.",
        "", f"![vertical forget gate]({png.name})", ""]
