"""Results pages: ``docs/results/<paper>.md`` written from the results files, never by hand.

For each experiment: a table with the paper's number (on the paper's data, for reference),
our mean and spread over seeds on the test split, the validation score, the optimizer steps
and training seconds (mean over seeds; evaluation excluded) and the parameter count; a bar
chart with the seed spread; and a verdict for each ordering the paper claims:

* **reproduced** — our means are ordered as the paper says and further apart than the sum of
  the two standard deviations over seeds;
* **same direction, within spread** — ordered as claimed, but the seed spreads overlap;
* **same direction, one seed** — ordered as claimed, with no spread to judge the gap by;
* **not reproduced** — ordered the other way (or equal);
* **no signal, both at chance** — both arms' means are within ``CHANCE_MARGIN`` (relative) of
  the experiment's chance level (e.g. 10% on 10 balanced classes): the runs learned nothing
  the claim could be judged by;
* **not run** — an arm is missing (a failed run or an unavailable task), with the reason.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from ctrlrnn.reproduce.experiments import EXPERIMENTS, PAGES, Experiment
from ctrlrnn.reproduce.runner import load_results, slug
from ctrlrnn.units import scale

#: metrics where lower is better (for an experiment's ``also`` metrics and their claims)
LOWER_IS_BETTER = {"perplexity", "loss", "nll", "bits_per_char"}


def _scale(metric: str) -> float:
    return scale(metric)


def _values(arm: dict[str, Any], scale: float = 1.0, metric: str = "") -> list[float]:
    """The test results of an arm's seeds: its main metric, or ``metric`` of its test metrics."""
    out = []
    for s in arm.get("seeds", {}).values():
        v = s.get("test") if not metric else s.get("test_metrics", {}).get(metric)
        if v is not None and math.isfinite(float(v)):
            out.append(scale * float(v))
    return out


def _claim_values(exp: Experiment, arm: dict[str, Any], metric: str) -> list[float]:
    return _values(arm, metric=metric) if metric and metric != exp.metric else _values(arm)


def _claim_text(better: str, worse: str, metric: str) -> str:
    return f"{better} beats {worse}" + (f" ({metric})" if metric else "")


def _ordered_arms(exp: Experiment, data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The arms in the order the experiment defines them (the results file sorts its keys)."""
    arms = data.get("arms", {})
    return [(a.label, arms[a.label]) for a in exp.arms if a.label in arms]


def _mean_std(values: list[float]) -> tuple[float, float]:
    if not values:
        return math.nan, math.nan
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


#: how far above (below, where lower is better) the chance level a mean must be to count,
#: relative to that level (0.2: beyond 12% accuracy where chance is 10%)
CHANCE_MARGIN = 0.2


def verdict(better: list[float], worse: list[float], higher_is_better: bool,
            chance: float | None = None) -> str:
    """Compare the seed results of the arm claimed better with the arm claimed worse.

    ``chance``: the metric's chance level in the values' units, if it has one."""
    if not better or not worse:
        return "not run"
    mb, sb = _mean_std(better)
    mw, sw = _mean_std(worse)
    if chance is not None:
        margin = CHANCE_MARGIN * abs(chance)
        if all((m <= chance + margin) if higher_is_better else (m >= chance - margin)
               for m in (mb, mw)):
            return "no signal, both at chance"
    gap = (mb - mw) if higher_is_better else (mw - mb)
    if gap > 0 and min(len(better), len(worse)) < 2:
        return "same direction, one seed"  # no spread to judge the gap by
    if gap > 0 and gap > sb + sw:
        return "reproduced"
    if gap > 0:
        return "same direction, within spread"
    return "not reproduced"


def _fmt(v: float | None, digits: int = 4) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    return f"{v:.{digits}g}"


def _plot(exp: Experiment, data: dict[str, Any], path: Path, scale: float = 1.0) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, means, stds, points = [], [], [], []
    for label, arm in _ordered_arms(exp, data):
        vals = _values(arm, scale)
        if not vals:
            continue
        m, s = _mean_std(vals)
        labels.append(label)
        means.append(m)
        stds.append(s)
        points.append(vals)
    if not labels:
        return False
    fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(labels), 3.2))
    xs = range(len(labels))
    ax.bar(xs, means, yerr=stds, capsize=4, color="#8fb3d9", edgecolor="#33608c")
    for x, vals in zip(xs, points):
        ax.scatter([x] * len(vals), vals, color="#1b3a5c", s=12, zorder=3)
    ax.set_xticks(list(xs), labels, rotation=15, ha="right")
    ax.set_ylabel(f"test {exp.metric}{' (%)' if scale != 1.0 else ''}")
    ax.set_title(exp.title, fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    lo = min(min(v) for v in points)
    hi = max(max(v) for v in points)
    pad = (hi - lo) * 0.3 or abs(hi) * 0.05 or 1.0
    ax.set_ylim(lo - pad, hi + pad)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def experiment_section(exp: Experiment, data: dict[str, Any] | None, out_dir: Path,
                       mode: str) -> tuple[list[str], list[tuple[str, str, str]]]:
    """Markdown lines for one experiment and its claim verdicts ``(claim, source, verdict)``."""
    scale = _scale(exp.metric)
    unit = " (%)" if scale != 1.0 else ""
    lines = [f"### {exp.title}", "", f"Task `{exp.task}`, metric: test {exp.metric}{unit} "
             f"({'higher' if exp.higher_is_better else 'lower'} is better). "
             f"Paper's numbers: {exp.paper_metric or 'none for this setting'}."]
    if exp.chance is not None:
        lines[-1] += f" Chance level: {_fmt(exp.chance * scale)}{unit.strip(' ()')}."
    if exp.note:
        lines += ["", exp.note]
    limit = exp.overrides(mode).get("eval_batches")
    if limit:
        lines += ["", f"In this mode every evaluation, the final test included, reads only the "
                  f"first {limit} evaluation batches of its split."]
    verdicts: list[tuple[str, str, str]] = []
    if data is None:
        lines += ["", "Not run yet in this mode.", ""]
        for c in exp.claims:
            verdicts.append((_claim_text(c.better, c.worse, c.metric), c.source, "not run"))
        return lines, verdicts
    also_heads = "".join(f" test {m}: ours (paper) |" for m in exp.also)
    lines += ["", f"| arm | paper | ours: mean ± std (seeds) |{also_heads} valid | steps | "
              "train s | parameters |", "|---" * (7 + len(exp.also)) + "|"]
    paper_also = {a.label: a.paper_also for a in exp.arms}
    for label, arm in _ordered_arms(exp, data):
        vals = _values(arm, scale)
        m, s = _mean_std(vals)
        also_cells = ""
        for metric in exp.also:
            am, asd = _mean_std(_values(arm, _scale(metric), metric))
            also_cells += (f" {_fmt(am)} ± {_fmt(asd, 2)} "
                           f"({_fmt(paper_also.get(label, {}).get(metric))}) |")
        seeds = list(arm.get("seeds", {}).values())
        valid = [scale * x["valid"] for x in seeds if x.get("valid") is not None]
        secs = [x["train_seconds"] for x in seeds if x.get("train_seconds")]
        steps = seeds[0].get("steps") if seeds else None
        params = seeds[0].get("parameters") if seeds else None
        lines.append(
            f"| {label} | {_fmt(arm.get('paper'))} | {_fmt(m)} ± {_fmt(s, 2)} ({len(vals)}) |"
            f"{also_cells} {_fmt(statistics.fmean(valid) if valid else None)} | {steps or '–'} | "
            f"{_fmt(statistics.fmean(secs) if secs else None, 3)} | {params or '–'} |"
        )
    if data.get("errors"):
        lines += ["", "Runs that did not finish:", ""]
        lines += [f"- {k}: `{v[:300]}`" for k, v in data["errors"].items()]
    png = out_dir / f"{exp.paper}-{slug(exp.id)}-{mode}.png"
    if _plot(exp, data, png, scale):
        lines += ["", f"![{exp.title}]({png.name})"]
    lines += ["", "| claim (paper) | where | at our scale |", "|---|---|---|"]
    arms = data.get("arms", {})
    for c in exp.claims:
        higher = exp.higher_is_better if not c.metric or c.metric == exp.metric else (
            c.metric not in LOWER_IS_BETTER)
        main = not c.metric or c.metric == exp.metric
        v = verdict(_claim_values(exp, arms.get(c.better, {}), c.metric),
                    _claim_values(exp, arms.get(c.worse, {}), c.metric), higher,
                    exp.chance if main else None)
        text = _claim_text(c.better, c.worse, c.metric)
        verdicts.append((text, c.source, v))
        lines.append(f"| {text} | {c.source} | **{v}** |")
    lines.append("")
    return lines, verdicts


def results_stamp(results_dir: Path, mode: str, experiments: tuple[Experiment, ...]) -> str:
    """When the newest of these experiments' results was finished, as the results files
    record it (so the pages are the same wherever they are regenerated)."""
    stamps = [str(data["finished"]) for exp in experiments
              if (data := load_results(results_dir, mode, exp)) and data.get("finished")]
    return max(stamps) if stamps else "not recorded"


def write_pages(results_dir: Path, out_dir: Path, mode: str,
                extra_sections: dict[str, list[str]] | None = None,
                experiments: tuple[Experiment, ...] | None = None,
                extra_claims: list[tuple[str, str, str, str, str]] | None = None) -> list[Path]:
    """Write one page per paper plus ``README.md`` (the summary); returns the paths.

    ``experiments`` limits the pages to those experiments (and their papers);
    ``extra_claims`` ``(page, experiment, claim, where, verdict)`` are verdicts made outside
    the experiments' tables (the speed sections), listed in the summary with their pages'.
    """
    chosen = EXPERIMENTS if experiments is None else experiments
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = results_stamp(results_dir, mode, chosen)
    written: list[Path] = []
    summary: list[str] = [
        "# Reproduction results", "",
        f"Generated by `ctrlrnn reproduce{' --quick' if mode == 'quick' else ''}` from the "
        f"results files in `{results_dir / mode}` (newest result: {stamp}); do not edit by "
        "hand.", "",
        "| paper | experiment | claim | where | at our scale |", "|---|---|---|---|---|",
    ]
    total_seconds = 0.0
    for paper, title in PAGES.items():
        exps = [e for e in chosen if e.paper == paper]
        if not exps and experiments is not None:
            continue
        lines = [f"# {title}", "",
                 f"Mode: **{mode}**. Generated by `ctrlrnn reproduce` from the results "
                 f"files (newest result: {stamp}); do not edit by hand.", ""]
        for exp in exps:
            data = load_results(results_dir, mode, exp)
            if data:
                total_seconds += float(data.get("seconds", 0.0))
            section, verdicts = experiment_section(exp, data, out_dir, mode)
            lines += section
            for claim, source, v in verdicts:
                summary.append(
                    f"| [{paper}]({paper}.md) | {exp.title} | {claim} | {source} | {v} |")
        lines += (extra_sections or {}).get(paper, [])
        for page, title, claim, source, v in extra_claims or []:
            if page == paper:
                summary.append(f"| [{paper}]({paper}.md) | {title} | {claim} | {source} | {v} |")
        path = out_dir / f"{paper}.md"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        written.append(path)
    summary += ["", f"Training time of the experiments in these files: "
                f"{total_seconds / 60:.1f} minutes on this machine.", ""]
    readme = out_dir / "README.md"
    readme.write_text("\n".join(summary) + "\n", encoding="utf-8")
    written.append(readme)
    return written
