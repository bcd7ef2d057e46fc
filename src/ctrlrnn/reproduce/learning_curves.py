"""Each final run's validation curve: the metric that selects its checkpoint at every
evaluation, read from the run's log into the results file (so the pages can show how a seed
got to its result, and where it stopped, without the run directories), and the figure of an
experiment's curves.

A seed's ``curve`` is a list of ``[step, value]`` pairs in step order. A run resumed after an
interruption evaluates the steps after its checkpoint again: the later record of a step wins.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any

from ctrlrnn.reproduce.experiment_spec import Experiment
from ctrlrnn.reproduce.page_cells import metric_scale, ordered_arms
from ctrlrnn.train.logs import read_rows

#: the arms' colours in the curves' figure, in the experiment's order
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf")


def read_curve(run: Path, metric: str) -> list[list[float]]:
    """The validation ``metric`` of the run in ``run`` at each evaluation its ``log.jsonl``
    records, as ``[step, value]`` pairs in step order; empty without a log. A line cut short
    (a process killed while writing it) is skipped."""
    key = f"valid_{metric}"
    by_step: dict[int, float] = {}
    for record in read_rows(run / "log.jsonl"):
        if not isinstance(record, dict) or record.get("split") != "valid":
            continue
        value, step = record.get(key), record.get("step")
        if isinstance(value, (int, float)) and isinstance(step, int):
            by_step[step] = float(value)
    return [[step, by_step[step]] for step in sorted(by_step)]


def curve_of_run(curve: list[list[float]], entry: dict[str, Any]) -> bool:
    """Whether ``curve`` is the one of the run a seed's results ``entry`` summarises: it
    evaluated the entry's best checkpoint at the validation value the entry holds for it and
    went no further than the entry's last step (a directory of the same name can hold a later
    run, at another definition, that has not finished)."""
    values = dict((int(step), value) for step, value in curve)
    best, held, last = entry.get("best_step"), entry.get("valid_selected"), entry.get("steps")
    if not isinstance(best, int) or best not in values:
        return False
    if isinstance(last, int) and curve[-1][0] > last:
        return False
    if isinstance(held, (int, float)) and math.isfinite(held):
        return math.isclose(values[best], float(held), rel_tol=1e-4, abs_tol=1e-9)
    return True


def add_missing_curves(data: dict[str, Any] | None, exp: Experiment, run_of: Any) -> int:
    """Give each seed of ``data`` (a results file's contents) without a ``curve`` the one its
    run directory holds (``run_of(arm_label, seed, params)``: the directory); the number of
    seeds that gained one."""
    gained = 0
    for label, arm in (data or {}).get("arms", {}).items():
        for seed, entry in arm.get("seeds", {}).items():
            if not isinstance(entry, dict) or entry.get("curve"):
                continue
            curve = read_curve(run_of(label, int(seed), entry.get("params") or None),
                               exp.selected)
            if curve and curve_of_run(curve, entry):
                entry["curve"] = curve
                gained += 1
    return gained


def drawn(seed: dict[str, Any]) -> bool:
    """Whether a seed's curve is drawn: it has two evaluations or more (one point is no
    curve: the quick mode evaluates many runs only at their end)."""
    return len(seed.get("curve") or []) >= 2


def plot_curves(exp: Experiment, data: dict[str, Any], path: Path) -> bool:
    """Draw every seed's validation curve (one colour an arm), with a dot at the checkpoint
    its test is scored at; False, drawing nothing, when no seed has a curve to draw
    (:func:`drawn`)."""
    arms = [(label, [s for s in arm.get("seeds", {}).values() if drawn(s)])
            for label, arm in ordered_arms(exp, data)]
    arms = [(label, seeds) for label, seeds in arms if seeds]
    if not arms:
        return False
    import matplotlib  # the `train` extra: only the pages' figures need it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scale = metric_scale(exp.selected)
    fig, ax = plt.subplots(figsize=(7.2, 3.4))
    for (label, seeds), colour in zip(arms, COLOURS * len(arms)):
        for i, seed in enumerate(seeds):
            steps = [p[0] for p in seed["curve"]]
            values = [p[1] * scale if math.isfinite(p[1]) else math.nan for p in seed["curve"]]
            ax.plot(steps, values, color=colour, linewidth=1.0, alpha=0.85,
                    label=f"{label} ({len(seeds)} seed{'s' if len(seeds) > 1 else ''})"
                    if i == 0 else None)
            best = seed.get("best_step")
            if best in steps:
                ax.scatter([best], [values[steps.index(best)]], color=colour, s=14, zorder=3)
    ax.set_xlabel("training step")
    ax.set_ylabel(f"validation {exp.selected}{' (%)' if scale != 1.0 else ''}")
    ax.set_title(textwrap.fill(f"{exp.title}: validation curves", 70), fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)
    return True


def curves_caption(exp: Experiment, data: dict[str, Any]) -> str:
    """The sentence under the curves' figure: what it shows, and which seeds it leaves out."""
    seeds = [s for _label, arm in ordered_arms(exp, data) for s in arm.get("seeds", {}).values()]
    shown = sum(1 for s in seeds if drawn(s))
    text = (f"Validation {exp.selected} of each final run at every evaluation; a dot marks the "
            "checkpoint its test is scored at, and a curve ends where its run stopped.")
    if shown < len(seeds):
        missing = len(seeds) - shown
        text += (f" {missing} of the {len(seeds)} runs {'is' if missing == 1 else 'are'} not "
                 "shown: the results "
                 "file holds no curve of two evaluations or more for them (they were evaluated "
                 "once, or trained before it kept curves and `ctrlrnn reproduce --pages-only` "
                 "found no run directory to read one from).")
    return text
