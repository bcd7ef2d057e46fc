"""The bar chart of an experiment's results page: each arm's seeds, their mean and spread
from zero, and the paper's numbers."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from ctrlrnn.reproduce.experiment_spec import Experiment
from ctrlrnn.reproduce.page_cells import ordered_arms, seed_values
from ctrlrnn.reproduce.verdicts import mean_std


def plot_experiment(exp: Experiment, data: dict[str, Any], path: Path, scale: float = 1.0) -> bool:
    import matplotlib  # the `train` extra: only the pages' figures need it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, means, stds, points, papers = [], [], [], [], []
    paper_of = {a.label: a.paper for a in exp.arms}
    for label, arm in ordered_arms(exp, data):
        vals = seed_values(arm, scale)
        if not vals:
            continue
        m, s = mean_std(vals)
        labels.append(label)
        means.append(m)
        stds.append(s)
        points.append(vals)
        papers.append(paper_of.get(label))
    if not labels:
        return False
    width = 2.4 + 1.3 * len(labels)  # inches, the legend's column to the right included
    fig, ax = plt.subplots(figsize=(width, 3.2))
    xs = range(len(labels))
    ax.bar(xs, means, yerr=stds, capsize=4, color="#8fb3d9", edgecolor="#33608c")
    for x, vals in zip(xs, points):
        ax.scatter([x] * len(vals), vals, color="#1b3a5c", s=12, zorder=3,
                   label="seeds" if x == 0 else None)
    marked = [(x, v) for x, v in zip(xs, papers) if v is not None]
    if marked:
        ax.scatter([x for x, _v in marked], [v for _x, v in marked], marker="_", s=400,
                   linewidths=2, color="#c0392b", zorder=4, label="paper")
    # outside the axes: inside, it can cover a seed or a paper marker
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_xticks(list(xs), labels, rotation=15, ha="right")
    ax.set_ylabel(f"test {exp.metric}{' (%)' if scale != 1.0 else ''}")
    # wrapped to the axes (about 12 characters an inch at 9 points), never cut off
    ax.set_title(textwrap.fill(exp.title, int((width - 1.0) * 12)), fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    # from zero, so that the bars' heights compare (a cut axis exaggerates gaps)
    hi = max([max(v) for v in points] + [m + s for m, s in zip(means, stds)]
             + [v for v in papers if v is not None])
    lo = min([min(v) for v in points] + [0.0])
    ax.set_ylim(lo, hi * 1.08 if hi > 0 else 1.0)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True
