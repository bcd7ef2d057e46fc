"""The end-of-run report: learning curves (PNG, matplotlib) and a markdown page."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any

import torch

from ctrlrnn import files
from ctrlrnn.metric_conventions import PERCENT, format_metric, scale
from ctrlrnn.train.logs import replace_atomically


def plot_curves(rows: list[dict[str, Any]], path: Path, metric: str) -> Path | None:
    """Training loss and the validation metric against the step, side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [(r["step"], r["loss"]) for r in rows if r.get("split") == "train" and r.get("loss")
             is not None]
    key = f"valid_{metric}"
    valid = [(r["step"], scale(metric) * r[key]) for r in rows
             if r.get("split") == "valid" and r.get(key) is not None]
    if not train and not valid:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    if train:
        axes[0].plot(*zip(*train), lw=1.2)
    axes[0].set_xlabel("step")
    axes[0].set_ylabel("training loss")
    axes[0].set_title("training loss")
    axes[0].grid(alpha=0.3)
    if valid:
        axes[1].plot(*zip(*valid), marker="o", lw=1.2)
    axes[1].set_xlabel("step")
    unit = " (%)" if metric in PERCENT else ""
    axes[1].set_ylabel(metric + unit)
    axes[1].set_title(f"validation {metric}{unit}")
    axes[1].grid(alpha=0.3)
    fig.tight_layout()
    try:
        with files.writing(path):
            fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)
    return path


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _metrics_table(result: dict[str, Any]) -> list[str]:
    valid, test = result["valid"], result["test"]
    if not valid:
        return ["None: the run stopped before any checkpoint was evaluated."]
    keys = sorted(valid)
    return [
        "| split | " + " | ".join(keys) + " |",
        "|---|" + "---|" * len(keys),
        "| valid | " + " | ".join(format_metric(k, valid[k]) for k in keys) + " |",
        "| test | " + " | ".join(format_metric(k, test.get(k, "")) for k in keys) + " |",
    ]


def write_report(
    out_dir: Path,
    *,
    config: dict[str, Any],
    result: dict[str, Any],
    data: dict[str, Any],
    model_info: dict[str, Any],
    rows: list[dict[str, Any]],
) -> Path:
    """Write ``report.md``, ``result.json`` (strict JSON) and ``curves.png`` into ``out_dir``;
    returns the report path."""
    plot = plot_curves(rows, out_dir / "curves.png", result["metric"])
    best = (f"- best validation {result['metric']} at step {result['best_step']}"
            if result["valid"] else "- no checkpoint was evaluated: no metrics to report")
    diverged = result.get("diverged")
    lines = [
        f"# Run report: {config['task']} with {config['model']}",
        "",
        f"- steps: {result['step']}, epochs completed: {result['epochs_completed']}, "
        f"training time: {result['train_seconds']:.1f} s",
        best,
        *([f"- stopped: {diverged['what']} (nothing after the last finite checkpoint was "
           "kept)"] if diverged else []),
        f"- machine: {platform.machine()}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads",
        "",
        "## Metrics (best checkpoint)",
        "",
        *_metrics_table(result),
        "",
        "## Model",
        "",
        *[f"- {k}: {_fmt(v)}" for k, v in model_info.items()],
        "",
        "## Data",
        "",
        *[f"- {k}: {_fmt(v)}" for k, v in data.items()],
        "",
    ]
    if plot is not None:
        lines += ["## Learning curves", "", f"![learning curves]({plot.name})", ""]
    lines += ["## Configuration", "", "```json", files.dumps(config, indent=2), "```", ""]
    path = out_dir / "report.md"
    replace_atomically(path, lambda fh: fh.write("\n".join(lines)))
    replace_atomically(out_dir / "result.json",
                       lambda fh: fh.write(files.dumps(result, indent=2)))
    return path
