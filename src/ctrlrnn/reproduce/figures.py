"""Analysis figures of the papers, recorded from the reproduction runs and drawn on the pages.

* CAS-LSTM paper figure 4: the distribution of the vertical forget gate ``g`` of CAS-LSTM's
  upper layer on sentences, after training (SST-5-like run);
* METAGROSS paper figures 2-9: the soft depth gates alpha_t and beta_t of METAGROSS — their
  mean at initialisation and after training (figures 2-6), and along the time steps of one
  sequence (the dynamic recursion of figures 7-9) — for the pixel-by-pixel experiments.

Two steps, so that the pages never need a checkpoint: :func:`record` measures the gates from
the best checkpoint of an experiment's seed-0 run right after it is trained, and the runner
stores what it returns under ``"figures"`` in the experiment's results file (committed with
the other results). :func:`depth_gate_section` and :func:`cas_gate_section` draw the figures
and write their text from the results files alone, so the pages come out the same on any
machine.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Collection
from pathlib import Path
from typing import Any

import torch

from ctrlrnn.nn.cas_lstm import CASLSTM
from ctrlrnn.train.run import rebuild_from_checkpoint

#: experiment id -> (the figure it records, the arm whose seed-0 run it is measured on)
FIGURE_ARMS: dict[str, tuple[str, str]] = {
    "metagross-mnist": ("depth_gates", "METAGROSS"),
    "metagross-fashion": ("depth_gates", "METAGROSS"),
    "cas-sst5": ("vertical_gate", "2-layer CAS-LSTM"),
}
#: bins of the vertical-gate histogram over [0, 1]
HISTOGRAM_BINS = 50
#: decimals kept of the recorded gate values (the figures need no more)
DECIMALS = 5


def _model_and_batch(run_dir: Path) -> tuple[Any, Any, Any, dict[str, Any]] | None:
    """(task, initial model, trained model, a batch of 64 training sequences) rebuilt from a
    run's best checkpoint; the initial model has the run's own initialisation."""
    best = run_dir / "best.safetensors"
    if not best.exists():
        return None
    _cfg, task, initial, ckpt = rebuild_from_checkpoint(best)
    trained = copy.deepcopy(initial)
    ckpt.restore(trained, rng=False)
    return task, initial.eval(), trained.eval(), task.train_batches(0, 64)[0]


def _rounded(values: torch.Tensor) -> list[float]:
    return [round(float(v), DECIMALS) for v in values.flatten()]


def _gates(model: Any, pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """alpha, beta of the first METAGROSS layer: ``(B, T)`` for the first internal unit."""
    rnn = model.encoder.rnn
    with torch.no_grad():
        _out, _h, (alpha, beta) = rnn(pixels, return_gates=True)
    return alpha[0, ..., 0], beta[0, ..., 0]


def record_depth_gates(run_dir: Path) -> dict[str, Any] | None:
    """The depth-gate statistics of a METAGROSS pixel run (``None`` without a checkpoint)."""
    built = _model_and_batch(run_dir)
    if built is None:
        return None
    _task, initial, trained, batch = built
    pixels = batch["pixels"]
    a0, b0 = _gates(initial, pixels)
    a1, b1 = _gates(trained, pixels)
    return {
        "kind": "depth_gates",
        "sequences": int(pixels.shape[0]),
        "mean": {"alpha_init": float(a0.mean()), "beta_init": float(b0.mean()),
                 "alpha_trained": float(a1.mean()), "beta_trained": float(b1.mean())},
        "alpha_sequence": _rounded(a1[0]),
        "beta_sequence": _rounded(b1[0]),
        "alpha_sequence_std": float(a1[0].std()),
    }


def record_vertical_gate(run_dir: Path) -> dict[str, Any] | None:
    """The vertical forget gate ``g`` of layer 2 of a CAS-LSTM run: its histogram, mean and
    quantiles over every valid step and unit of a batch (``None`` without a checkpoint)."""
    built = _model_and_batch(run_dir)
    if built is None:
        return None
    task, _initial, trained, batch = built
    cas = next((m for m in trained.modules() if isinstance(m, CASLSTM)), None)
    if cas is None or cas.num_layers < 2:
        return None
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
        values = g[:, valid].flatten().float()
    else:
        values = g.flatten().float()
    counts = torch.histc(values, bins=HISTOGRAM_BINS, min=0.0, max=1.0)
    q = torch.quantile(values, torch.tensor([0.1, 0.5, 0.9])).tolist()
    return {
        "kind": "vertical_gate",
        "values": int(values.numel()),
        "mean": float(values.mean()),
        "quantiles": {"0.1": q[0], "0.5": q[1], "0.9": q[2]},
        "histogram": [int(c) for c in counts],
    }


def record(exp_id: str, run_dir: Path) -> dict[str, Any] | None:
    """What experiment ``exp_id``'s figure needs, measured on its seed-0 run in ``run_dir``
    (``None`` if the experiment has no figure or the run has no checkpoint)."""
    kind = FIGURE_ARMS.get(exp_id, ("", ""))[0]
    if kind == "depth_gates":
        return record_depth_gates(run_dir)
    if kind == "vertical_gate":
        return record_vertical_gate(run_dir)
    return None


def _stored(results_dir: Path, mode: str, exp_id: str) -> dict[str, Any] | None:
    """The figure statistics in experiment ``exp_id``'s results file, if any."""
    path = results_dir / mode / f"{exp_id}.json"
    if not path.exists():
        return None
    return json.loads(path.read_text(encoding="utf-8")).get("figures")


def _missing(exp_id: str, what: str) -> str:
    return (f"`{exp_id}`: its results file records no {what} (they are recorded when the "
            f"experiment's seed-0 run is trained; `ctrlrnn reproduce --rerun {exp_id}` "
            "records them).")


def depth_gate_section(mode: str, results_dir: Path, docs_dir: Path,
                       ids: Collection[str] | None = None) -> list[str]:
    """Markdown (and PNGs) for the depth-gate figures, from the results files; with ``ids``,
    of those experiments only (nothing when none of them has the figure)."""
    chosen = [exp_id for exp_id, (kind, _arm) in FIGURE_ARMS.items()
              if kind == "depth_gates" and (ids is None or exp_id in ids)]
    if not chosen:
        return []
    import matplotlib  # the `train` extra: only the pages' figures need it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = ["### Depth gates (figures 2-9)", "",
             "Mean soft depth gates alpha and beta (section 2.1) of the first METAGROSS layer "
             "over a batch of 64 training sequences, at initialisation (the run's own seed) "
             "and after training, and along the time steps of one sequence (the dynamic "
             "recursion of figures 7-9); seed 0.", ""]
    for exp_id in chosen:
        fig_data = _stored(results_dir, mode, exp_id)
        if not fig_data:
            lines += [_missing(exp_id, "depth-gate statistics"), ""]
            continue
        m = fig_data["mean"]
        means = [m["alpha_init"], m["beta_init"], m["alpha_trained"], m["beta_trained"]]
        fig, axes = plt.subplots(1, 2, figsize=(11, 3.4))
        names = ["alpha (init)", "beta (init)", "alpha (trained)", "beta (trained)"]
        axes[0].bar(names, means, color=["#c6d7ea", "#f2d0a9", "#3b6ea5", "#d9822b"])
        axes[0].set_ylim(0, 1)
        axes[0].set_title(f"{exp_id}: mean depth gates")
        axes[0].tick_params(axis="x", labelrotation=15)
        alpha, beta = fig_data["alpha_sequence"], fig_data["beta_sequence"]
        axes[1].plot(range(len(alpha)), alpha, lw=0.8, label="alpha (trained)")
        axes[1].plot(range(len(beta)), beta, lw=0.8, label="beta (trained)")
        axes[1].set_ylim(0, 1)
        axes[1].set_xlabel("time step (pixel)")
        axes[1].set_title("dynamic recursion along one sequence")
        axes[1].legend(fontsize=8)
        fig.tight_layout()
        png = docs_dir / f"metagross-depth-gates-{exp_id}-{mode}.png"
        fig.savefig(png, dpi=100, metadata={"Software": None})
        plt.close(fig)
        lines += [f"`{exp_id}`: mean alpha {means[0]:.3f} -> {means[2]:.3f}, mean beta "
                  f"{means[1]:.3f} -> {means[3]:.3f} (init -> trained); alpha's standard "
                  f"deviation along the sequence after training: "
                  f"{fig_data['alpha_sequence_std']:.4f}.", "",
                  f"![depth gates {exp_id}]({png.name})", ""]
    return lines


def cas_gate_section(mode: str, results_dir: Path, docs_dir: Path,
                     ids: Collection[str] | None = None) -> list[str]:
    """Markdown (and a PNG) for the vertical forget-gate histogram of the CAS-LSTM paper's
    figure 4, from the results file; with ``ids``, nothing unless its experiment is one."""
    exp_id = next(e for e, (kind, _arm) in FIGURE_ARMS.items() if kind == "vertical_gate")
    if ids is not None and exp_id not in ids:
        return []
    import matplotlib  # the `train` extra: only the pages' figures need it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = ["### Vertical forget gate (figure 4)", ""]
    fig_data = _stored(results_dir, mode, exp_id)
    if not fig_data:
        return lines + [_missing(exp_id, "vertical-gate statistics"), ""]
    counts = fig_data["histogram"]
    width = 1.0 / len(counts)
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    ax.bar([i * width for i in range(len(counts))], counts, width=width, align="edge",
           color="#3b6ea5")
    ax.set_xlim(0, 1)
    ax.set_xlabel("vertical forget gate g (layer 2)")
    ax.set_ylabel("count")
    ax.set_title(f"{exp_id}: g over a batch of 64 training sentences", fontsize=9)
    fig.tight_layout()
    png = docs_dir / f"cas-lstm-vertical-gate-{mode}.png"
    fig.savefig(png, dpi=100, metadata={"Software": None})
    plt.close(fig)
    q = fig_data["quantiles"]
    return lines + [
        f"Values of `g` at every valid step and unit of layer 2 (`{exp_id}`, seed 0): mean "
        f"{fig_data['mean']:.3f}, 10/50/90% quantiles {q['0.1']:.3f} / {q['0.5']:.3f} / "
        f"{q['0.9']:.3f}.", "", f"![vertical forget gate]({png.name})", ""]
