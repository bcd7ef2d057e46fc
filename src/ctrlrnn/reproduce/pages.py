"""Results pages: ``docs/results/<paper>.md`` written from the results files, never by hand.

For each experiment: a table with the paper's number (on the paper's data, for reference),
our mean and spread over seeds on the test split, the validation score, the optimizer steps,
whether the runs converged (stopped by their patience rather than the step cap) and the
training seconds (mean over seeds, only for runs that had the machine to themselves) and the
parameter count; a bar chart from zero with the seed spread and the paper's numbers; and a
verdict for each ordering the paper claims, by the one rule of :mod:`.verdicts`, stated on
the summary page.
"""

from __future__ import annotations

import math
import statistics
import textwrap
import unicodedata
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ctrlrnn.metric_conventions import higher_is_better, scale
from ctrlrnn.reproduce import paper_vs_here, verdicts
from ctrlrnn.reproduce.cache_validity import Standing
from ctrlrnn.reproduce.experiment_spec import PAGES, PAPER, Experiment
from ctrlrnn.reproduce.experiments import EXPERIMENTS
from ctrlrnn.reproduce.runner import is_cached, load_results, slug
from ctrlrnn.reproduce.tuning import IN_PROGRESS, Tuning, search_of
from ctrlrnn.reproduce.verdicts import mean_std, paper_level, useful_level
from ctrlrnn.tasks import TASKS, task_class


def _scale(metric: str) -> float:
    """The factor from a stored value of ``metric`` to the one shown: 100 for a percentage,
    a test metric of one slice of a percentage included (``accuracy_ops7``)."""
    return scale(metric.split("_ops", 1)[0])


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
    return mean_std(values)


def _mean_std_cell(values: list[float]) -> str:
    """``mean ± std`` of the seeds; one seed has no spread to show, so its std is "–"."""
    m, s = _mean_std(values)
    return f"{_fmt(m)} ± {_fmt(s, 2) if len(values) > 1 else '–'}"


verdict = verdicts.verdict


def _fmt(v: float | None, digits: int = 4) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    return f"{v:.{digits}g}"


def _plot(exp: Experiment, data: dict[str, Any], path: Path, scale: float = 1.0) -> bool:
    import matplotlib  # the `train` extra: only the pages' figures need it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, means, stds, points, papers = [], [], [], [], []
    paper_of = {a.label: a.paper for a in exp.arms}
    for label, arm in _ordered_arms(exp, data):
        vals = _values(arm, scale)
        if not vals:
            continue
        m, s = _mean_std(vals)
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


def experiment_section(exp: Experiment, data: dict[str, Any] | None, out_dir: Path,
                       mode: str) -> tuple[list[str], list[tuple[str, str, str]]]:
    """Markdown lines for one experiment and its claim verdicts ``(claim, source, verdict)``.

    The section opens with the "paper vs here" table of the full mode
    (:mod:`.paper_vs_here`), then leads with its answer: the state of its runs where they are
    not final, the results table, the claims' verdicts and the figure; then how the runs were
    set up (task, notes, stopping, search) and the search's trials."""
    scale = _scale(exp.metric)
    unit = " (%)" if scale != 1.0 else ""
    status: list[str] = []  # what qualifies the table: runs not final under this definition
    method = ["", f"Task `{exp.task}`, metric: test {exp.metric}{unit} "
              f"({'higher' if exp.higher_is_better else 'lower'} is better). "
              f"Paper's numbers: {exp.paper_metric or 'none for this setting'}."]
    if exp.chance is not None:
        method[-1] += f" Chance level: {_fmt(exp.chance * scale)}{unit.strip(' ()')}."
    if exp.note:
        method += ["", exp.note.strip()]
    # how the stored runs evaluated and stopped: the definition they ran under (stored with them)
    standing = Standing(exp, mode, data)
    ran = standing.stored_overrides or exp.overrides(mode)
    limit = _eval_limit(exp.task, ran)
    if limit:
        method += ["", f"In this mode every evaluation, the final test included, reads only the "
                   f"first {limit} evaluation batches of its split."]
    if not exp.paper_comparable:
        method += ["", "The paper's numbers are on other data or at another scale: they are "
                   "shown for reference, and the baseline check of the verdict rule does not "
                   "apply."]
    selected = ran.get("monitor") or exp.metric  # what the stored runs were selected by
    method += ["", _stopping_line(ran, selected)]
    tuning = exp.tuning(mode)
    trained = [arm for _, arm in _ordered_arms(exp, data or {}) if arm.get("seeds")]
    # results trained before the experiment defined its tuning (an arm with seeds, no search)
    stale = tuning is not None and any(not arm.get("tuning") for arm in trained)
    tuned = tuning is not None and not stale and data is not None and any(
        arm.get("tuning") for _, arm in _ordered_arms(exp, data))
    # arms whose stored seeds trained at the choice of a search this experiment no longer
    # defines (the tuning line says which): the verdicts that read them are marked
    searched_before = {label for label, arm in _ordered_arms(exp, data or {})
                       if tuning is not None and arm.get("seeds") and arm.get("tuning")
                       and search_of(arm["tuning"]) != tuning}
    if tuning is None:
        method += ["", "Tuning: none in this mode (every arm at the same learning rate)."]
    elif not stale:
        method += ["", _tuning_line(exp, tuning, trained, selected)]
    elif any(arm.get("tuning") for arm in trained):
        status += ["", f"**Partly untuned results.** The arms without a search in the table "
                   f"ran before this experiment defined its equal tuning ({tuning.describe()}), "
                   "all at one learning rate; the verdicts are marked *untuned* until "
                   f"`ctrlrnn reproduce --only {exp.id}` has trained every arm again."]
    else:
        status += ["", f"**Untuned results.** These runs predate the equal tuning this "
                   f"experiment now defines ({tuning.describe()}): every arm trained at the "
                   "same learning rate, and their verdicts are marked *untuned*. `ctrlrnn "
                   f"reproduce --only {exp.id}` replaces them."]
    judged: list[tuple[str, str, str]] = []
    heading = [f"### {exp.title}"]
    setup = paper_vs_here.table(exp, mode, data, standing) if mode in ("full", PAPER) else []
    if setup:  # how the paper ran it and how we do, row by row, from the definition
        heading += ["", *setup]
    scale_lines = paper_vs_here.paper_scale_lines(exp) if mode == "full" else []
    if scale_lines:
        heading += ["", " ".join(scale_lines)]
    if data is None:
        for c in exp.claims:
            judged.append((_claim_text(c.better, c.worse, c.metric), c.source,
                           verdicts.NOT_RUN))
        return [*heading, "", "Not run yet in this mode.", *status, *method, ""], judged
    defined = {a.label: a for a in exp.arms}
    earlier = _earlier_setting(exp, data, standing)
    if earlier:
        status += ["", f"**Earlier setting.** Stored runs of {', '.join(earlier)} trained in a "
                   "setting this experiment no longer defines (a model or data size, the "
                   "batch, the evaluation limit, the selecting metric or an arm's argument has "
                   "changed since); they "
                   "and the verdicts that read them are marked "
                   f"*earlier setting* until `ctrlrnn reproduce --only {exp.id}` has trained "
                   "them again."]
    planned = len(exp.arms) * len(exp.seeds(mode))
    finished = sum(_current_runs(arm, tuning is not None, lambda s, label=label: not standing
                                 .other_setting(defined[label], s))
                   for label, arm in _ordered_arms(exp, data))
    partial = not data.get("complete") and finished < planned
    if partial:
        status += ["", f"**In progress**: {finished} of the {planned} final runs are finished "
                   f"(their verdicts are marked *partial*); `ctrlrnn reproduce --only {exp.id}` "
                   "continues from the results file."]
    searching = [(label, arm[IN_PROGRESS]) for label, arm in _ordered_arms(exp, data)
                 if isinstance(arm.get(IN_PROGRESS), dict) and not data.get("complete")]
    if searching:
        status += ["", "**Search under way**: " + "; ".join(
            f"{label}, {len(record.get('trials') or [])} of {record.get('trials_planned')} "
            "trials" for label, record in searching) + " finished (the results file holds "
            f"them; `ctrlrnn reproduce --only {exp.id}` continues the search from there). Until "
            "an arm's search and seeds are finished, its row below is its earlier result."]
    also_heads = "".join(f" test {m}: ours (paper) |" for m in exp.also)
    table = ["", f"| arm | paper | ours: mean ± std (seeds) |{also_heads} valid {exp.metric} "
             "| steps "
             "(best) | converged | tuned (trials) | train s | parameters |",
             "|---" * (9 + len(exp.also)) + "|"]
    paper_also = {a.label: a.paper_also for a in exp.arms}
    for label, arm in _ordered_arms(exp, data):  # the paper's numbers: the definition's
        vals = _values(arm, scale)
        also_cells = ""
        for metric in exp.also:
            also_cells += (f" {_mean_std_cell(_values(arm, _scale(metric), metric))} "
                           f"({_fmt(paper_also.get(label, {}).get(metric))}) |")
        seeds = list(arm.get("seeds", {}).values())
        valid = [scale * x["valid"] for x in seeds if x.get("valid") is not None]
        params = seeds[0].get("parameters") if seeds else None
        shown_label = f"{label} (earlier setting)" if label in earlier else label
        table.append(
            f"| {shown_label} | {_fmt(defined[label].paper)} | {_mean_std_cell(vals)} "
            f"({len(vals)}) |"
            f"{also_cells} {_fmt(statistics.fmean(valid) if valid else None)} | "
            f"{_steps_cell(seeds)} | {_converged_cell(seeds)} | "
            f"{_tuned_cell(arm.get('tuning'))} | {_seconds_cell(seeds)} | {params or '–'} |"
        )
    table += _training_time_line(data)
    after: list[str] = []
    if tuned:
        after += _trial_tables(exp, data)
    if data.get("errors"):
        after += ["", "Runs that did not finish:", ""]
        after += [f"- {k}: `{v[:300]}`" for k, v in data["errors"].items()]
    figure: list[str] = []
    png = out_dir / f"{exp.paper}-{slug(exp.id)}-{mode}.png"
    if _plot(exp, data, png, scale):
        figure = ["", f"![{exp.title}]({png.name})"]
    claims = ["", "| claim (paper) | where | baseline: ours / paper | at our scale |",
              "|---|---|---|---|"]
    arms = data.get("arms", {})
    paper_of = {a.label: a for a in exp.arms}
    for c in exp.claims:
        main = not c.metric or c.metric == exp.metric
        metric = exp.metric if main else c.metric
        higher = higher_is_better(metric, exp.metric, exp.higher_is_better)
        unit_scale = scale if main else _scale(metric)
        worse_arm = paper_of.get(c.worse)
        paper = None
        if worse_arm is not None:
            paper = worse_arm.paper if main else worse_arm.paper_also.get(metric)
        worse_values = [v * unit_scale for v in
                        _claim_values(exp, arms.get(c.worse, {}), c.metric)]
        better_values = [v * unit_scale for v in
                         _claim_values(exp, arms.get(c.better, {}), c.metric)]
        level = useful_level(exp.chance if main else None, metric,
                             exp.useful if main else None)
        v = verdict(better_values, worse_values, higher,
                    useful=level * unit_scale if level is not None else None,
                    baseline_paper=paper if exp.paper_comparable else None,
                    converged=_claim_converged(arms, c))
        text = _claim_text(c.better, c.worse, c.metric)
        marks = [m for m, on in (("untuned", stale), ("partial", partial),
                                 ("earlier setting", c.better in earlier or c.worse in earlier),
                                 ("earlier search", c.better in searched_before
                                  or c.worse in searched_before))
                 if on]
        mark = f" ({', '.join(marks)})" if marks and v != verdicts.NOT_RUN else ""
        shown = f"**{v}**{mark}"
        judged.append((text, c.source, v + mark))
        baseline = _baseline_cell(worse_values, paper, higher)
        if v == verdicts.BASELINE_LOW:
            baseline += " " + _ceiling_why(list(arms.get(c.worse, {}).get("seeds", {}).values()))
        claims.append(f"| {text} | {c.source} | {baseline} "
                      f"| {shown} |")
    lines = [*heading, *status, *table, *claims, *figure, *method, *after, ""]
    return lines, judged


def _claim_converged(arms: dict[str, Any], claim: Any) -> bool:
    """Whether every seed of both arms of ``claim`` converged (stopped by its patience): the
    verdict is at most *early* otherwise (:func:`verdicts.all_converged`)."""
    reasons = [s.get("stop_reason") for label in (claim.better, claim.worse)
               for s in (arms.get(label) or {}).get("seeds", {}).values()]
    return verdicts.all_converged(reasons)


def claim_numbers(exp: Experiment, data: dict[str, Any] | None,
                  claim: Any) -> tuple[str, str]:
    """The paper's numbers and ours for a claim "A beats B", as ``"A vs B"`` texts: the
    paper's for each arm where it gives one, ours the mean ± std over seeds ("–": none)."""
    main = not claim.metric or claim.metric == exp.metric
    metric = exp.metric if main else claim.metric
    unit_scale = _scale(metric)
    paper_of = {a.label: a for a in exp.arms}

    def paper(label: str) -> str:
        arm = paper_of.get(label)
        if arm is None:
            return "–"
        return _fmt(arm.paper if main else arm.paper_also.get(metric))

    arms = (data or {}).get("arms", {})

    def ours(label: str) -> str:
        values = [v * unit_scale for v in _claim_values(exp, arms.get(label, {}), claim.metric)]
        return _mean_std_cell(values) if values else "–"

    papers = f"{paper(claim.better)} vs {paper(claim.worse)}"
    return ("–" if papers == "– vs –" else papers), f"{ours(claim.better)} vs {ours(claim.worse)}"


def _scale_cell(exp: Experiment | None, mode: str) -> str:
    """How our setting compares with the paper's: its task and size, or not."""
    if mode == "quick":
        return "quick: small models, short runs"
    if exp is None:
        return "this machine's CPU"
    return "the paper's task and size" if exp.paper_comparable else "smaller or other data"


#: a run had the machine to itself when it got at least this share of its threads' CPU time
#: and the load average when it started was at most its threads plus this
OWN_MACHINE_SHARE = 0.85
OWN_MACHINE_EXTRA_LOAD = 0.5


def _eval_limit(task: str, overrides: dict[str, Any]) -> int:
    """How many batches each evaluation of runs trained under ``overrides`` read (0: the whole
    split): the overrides' ``eval_batches``, else the task's own default (the language models
    limit theirs)."""
    if "eval_batches" in overrides:
        return int(overrides["eval_batches"] or 0)
    if task not in TASKS:
        return 0
    return int(task_class(task).defaults.get("eval_batches", 0) or 0)


def _earlier_setting(exp: Experiment, data: dict[str, Any], standing: Standing) -> list[str]:
    """The arms (labels, in the experiment's order) with a stored seed known to have trained
    in another setting than the one defined now (:meth:`Standing.other_setting`)."""
    defined = {a.label: a for a in exp.arms}
    return [label for label, entry in _ordered_arms(exp, data)
            if any(standing.other_setting(defined[label], s)
                   for s in entry.get("seeds", {}).values())]


def _current_runs(arm: dict[str, Any], tuned: bool,
                  in_setting: Callable[[dict[str, Any]], bool] = lambda s: True) -> int:
    """How many of an arm's seeds ran under the current definition: in its setting
    (``in_setting``) and, when the experiment tunes, at its tuned values (earlier untuned seeds
    do not count)."""
    seeds = [s for s in arm.get("seeds", {}).values() if in_setting(s)]
    if not tuned:
        return len(seeds)
    if not arm.get("tuning"):
        return 0
    chosen = arm["tuning"].get("chosen") or {}
    return sum(s.get("params") == chosen for s in seeds)


def _ceiling_why(seeds: list[dict[str, Any]]) -> str:
    """Why a baseline stayed below the paper's level, as its runs recorded it."""
    reasons = [x.get("stop_reason") for x in seeds]
    if reasons and all(r == "patience" for r in reasons):
        return "— its measured ceiling here: every seed converged (stopped by patience)"
    if any(r in ("max_steps", "epochs") for r in reasons):
        return "— stopped at the cap, not converged: more training than this budget"
    return "— its runs did not record how they stopped"


def _stopping_line(overrides: dict[str, Any], selected: str) -> str:
    """How the runs of this mode stop: patience (evaluations) or a cap, on the validation
    metric ``selected``, which also picks the checkpoint the test split is scored at."""
    caps = []
    if overrides.get("max_steps"):
        caps.append(f"{overrides['max_steps']} steps")
    caps.append(f"{overrides.get('epochs', 1)} epochs")
    every = (f"every {overrides['eval_every']} steps" if overrides.get("eval_every")
             else "at the end of each epoch")
    cap = " or ".join(caps)
    if overrides.get("patience"):
        return (f"Stopping: evaluated {every}; a run stops when the validation {selected} has "
                f"not improved for {overrides['patience']} evaluations, or at the cap of {cap} "
                "(then it is marked *not converged*); the test split is scored at the "
                f"checkpoint with the best validation {selected}.")
    return (f"Stopping: evaluated {every}; no patience in this mode, every run trains to the "
            f"cap of {cap}; the test split is scored at the checkpoint with the best "
            f"validation {selected}.")


def _tuning_line(exp: Experiment, tuning: Tuning, trained: list[dict[str, Any]],
                 selected: str) -> str:
    """The search the stored runs ran (from their tuning records), and the definition's when
    it has changed since."""
    ran: list[Tuning] = []
    for arm in trained:
        searched = search_of(arm.get("tuning"))
        if searched is not None and searched not in ran:
            ran.append(searched)
    if len(ran) > 1:
        return ("**Unequal tuning**: the arms' stored searches differ ("
                + "; ".join(t.describe() for t in ran)
                + f"). `ctrlrnn reproduce --only {exp.id}` searches every arm again with "
                f"{tuning.describe()}; until then the verdicts that read an arm of another "
                "search are marked *earlier search*.")
    line = ("Tuning, the same for every arm on the validation split: "
            f"{(ran[0] if ran else tuning).describe()}. The final seeds train at each arm's "
            f"best trial by validation {selected}.")
    if ran and ran[0] != tuning:
        line += (f" This experiment now defines another search ({tuning.describe()}): "
                 f"`ctrlrnn reproduce --only {exp.id}` trains it again, and until then the "
                 "verdicts are marked *earlier search*.")
    return line


def _short_key(key: str) -> str:
    return key.split(".")[-1]


def _tuned_cell(tuning: dict[str, Any] | None) -> str:
    if not tuning:
        return "–"
    chosen = tuning.get("chosen") or {}
    if not chosen:
        return f"every trial diverged ({len(tuning.get('trials', []))})"
    values = ", ".join(f"{_short_key(k)} {v:.3g}" for k, v in sorted(chosen.items()))
    return f"{values} ({len(tuning.get('trials', []))})"


def _trial_tables(exp: Experiment, data: dict[str, Any]) -> list[str]:
    """Every arm's trial table: proposed values, validation score (of the metric the search
    selected by), steps and how it stopped."""
    arms = _ordered_arms(exp, data)
    # records from before searches stored their metric were scored by the main one
    scored_by = {str((arm.get("tuning") or {}).get("metric") or exp.metric) for _, arm in arms
                 if arm.get("tuning")}
    heading = "valid " + (" / ".join(sorted(scored_by)) or exp.metric)
    lines = ["", "<details><summary>Tuning trials (validation split)</summary>", "",
             f"| arm | trial | values | {heading} | steps (best) | stopped by |",
             "|---|---|---|---|---|---|"]
    for label, arm in arms:
        table = arm.get("tuning") or {}
        scale = _scale(str(table.get("metric") or exp.metric))
        for row in table.get("trials", []):
            values = ", ".join(f"{_short_key(k)} {v:.3g}"
                               for k, v in sorted(row.get("params", {}).items()))
            best = " **(chosen)**" if row.get("trial") == table.get("best_trial") else ""
            valid = row.get("valid")
            lines.append(
                f"| {label} | {row.get('trial')}{best} | {values} | "
                f"{_fmt(valid * scale if isinstance(valid, (int, float)) else None)} | "
                f"{row.get('steps')} ({row.get('best_step')}) | {row.get('stop_reason')} |")
    return [*lines, "", "</details>"]


def _steps_cell(seeds: list[dict[str, Any]]) -> str:
    if not seeds:
        return "–"
    steps = [s.get("steps") for s in seeds]
    best = [s.get("best_step") for s in seeds]
    text = "/".join(str(x) for x in steps if x is not None) or "–"
    if any(b is not None for b in best):
        text += " (" + "/".join(str(b) if b is not None else "–" for b in best) + ")"
    return text


def _converged_cell(seeds: list[dict[str, Any]]) -> str:
    """``yes`` when every seed stopped by its patience, ``diverged`` when one stopped at a
    non-finite loss or parameter, ``not converged`` when one hit the step or epoch cap, ``not
    recorded`` for results written before the stop was recorded."""
    reasons = [s.get("stop_reason") for s in seeds]
    if not reasons or any(r is None for r in reasons):
        return "not recorded"
    diverged = sum(r == "diverged" for r in reasons)
    if diverged:
        return f"**diverged** ({diverged} of {len(reasons)}: stopped at a non-finite value)"
    capped = sum(r != "patience" for r in reasons)
    return "yes" if not capped else f"**not converged** ({capped} of {len(reasons)} capped)"


def _runs(data: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A results file's final runs and its tuning trials (their summaries and rows), the trials
    of a search under way (:data:`IN_PROGRESS`) included: work the file holds."""
    arms = list(data.get("arms", {}).values())
    final = [run for arm in arms for run in (arm.get("seeds") or {}).values()]
    trials = [run for arm in arms for key in ("tuning", IN_PROGRESS)
              for run in (arm.get(key) or {}).get("trials", [])]
    return final, trials


def _run_seconds(data: dict[str, Any]) -> tuple[list[float], list[float]]:
    """The recorded training seconds of a results file's final runs and of its tuning trials."""

    def recorded(runs: list[dict[str, Any]]) -> list[float]:
        return [float(run["train_seconds"]) for run in runs if run.get("train_seconds")]

    final, trials = _runs(data)
    return recorded(final), recorded(trials)


def _training_time_line(data: dict[str, Any]) -> list[str]:
    """The experiment's training time, tuning and final runs apart (when its runs record it)."""
    final, trials = _run_seconds(data)
    if not final and not trials:
        return []
    text = (f"Training time: {math.fsum(final + trials) / 60:.1f} minutes {_where(data)} "
            f"({math.fsum(final) / 60:.1f} for the {len(final)} final runs")
    if trials:
        text += f", {math.fsum(trials) / 60:.1f} for the {len(trials)} tuning trials"
    return ["", text + "; each run's own training clock, whatever else the machine ran)."]


def _where(data: dict[str, Any]) -> str:
    """Where the experiment's runs trained: "on this machine" (its CPU; runs from before the
    device was recorded trained there too), or the GPUs they name."""
    final, trials = _runs(data)
    runs = final + trials
    gpus = sorted({str(r["device"]) for r in runs if r.get("device") not in (None, "cpu")})
    if not gpus:
        return "on this machine"
    if len(gpus) == len({str(r.get("device") or "cpu") for r in runs}):
        return f"on {', '.join(gpus)}"
    return f"on this machine's CPU and {', '.join(gpus)}"


def training_seconds(data: dict[str, Any]) -> float:
    """The training time a results file holds: the recorded training seconds of every final
    run and every tuning trial it reports (each run's own clock, summed over its resumes, so
    an interrupted experiment counts all of its work and a superseded one none); the file's
    wall ``seconds`` when its runs record none (files written before they did)."""
    final, trials = _run_seconds(data)
    recorded = final + trials
    return math.fsum(recorded) if recorded else float(data.get("seconds", 0.0))


def _seconds_cell(seeds: list[dict[str, Any]]) -> str:
    """Mean training seconds, only when every seed had the machine to itself."""
    secs = [x["train_seconds"] for x in seeds if x.get("train_seconds")]
    if not secs:
        return "–"
    for x in seeds:
        if str(x.get("device") or "cpu").startswith("cuda"):
            continue  # GPU time: the CPU share of the launching thread says nothing of it
        share, load, threads = x.get("cpu_share"), x.get("load_start"), x.get("threads")
        if share is None or load is None or threads is None:
            return "not recorded"
        if share < OWN_MACHINE_SHARE or load > threads + OWN_MACHINE_EXTRA_LOAD:
            return "shared machine"
    mean = statistics.fmean(secs)
    return f"{mean:.0f}" if mean >= 100 else _fmt(mean, 3)  # 1040, not 1.04e+03


def _baseline_cell(values: list[float], paper: float | None, higher: bool) -> str:
    if paper is None or not values:
        return "–"
    m = statistics.fmean(values)
    return f"{_fmt(m)} / {_fmt(paper)} ({paper_level(m, paper, higher):.0%})"


def results_stamp(results_dir: Path, mode: str, experiments: tuple[Experiment, ...]) -> str:
    """When the newest of these experiments was finished, as the results files record it (so
    the pages are the same wherever they are regenerated), and which of those with results are
    not finished under their current definitions (in progress, or holding an earlier
    definition's runs): a file records its time only when its experiment finishes, so their
    newest runs can be later than the time given."""
    stamps: list[str] = []
    open_ids: list[str] = []
    for exp in experiments:
        data = load_results(results_dir, mode, exp)
        if not data:
            continue
        if data.get("finished"):
            stamps.append(str(data["finished"]))
        if not is_cached(results_dir, mode, exp):
            open_ids.append(f"`{exp.id}`")
    text = f"newest finished experiment: {max(stamps)}" if stamps else "no experiment finished"
    if open_ids:
        text += f"; not finished under the current definition: {', '.join(open_ids)}"
    return text


#: the lines around the reproduction table of the repository's README.md, which
#: :func:`write_pages` rewrites in the full mode (tests/docs checks it against the summary)
README_START = ("<!-- the reproduction table: written by `ctrlrnn reproduce --pages-only` from "
                "the results files; do not edit -->")
README_END = "<!-- end of the reproduction table -->"
#: verdicts as the README's tally says them
_SHORT_VERDICT = {verdicts.SAME_WITHIN: "same direction", verdicts.OPPOSITE_WITHIN:
                  "opposite within spread", verdicts.BASELINE_LOW: "no verdict",
                  verdicts.EARLY_SAME: "early, same direction",
                  verdicts.EARLY_OPPOSITE: "early, opposite"}


def short_title(title: str) -> str:
    """An experiment's title without its details: the part before a colon, without a
    closing parenthesis that names its source ("Sorting, n = 5 (table 1)" -> "Sorting,
    n = 5")."""
    head = title.split(":", 1)[0].strip()
    if head.endswith(")") and "(" in head:
        said = head[head.rindex("("):]
        if any(word in said for word in ("table", "appendix", "figure", "protocol", "`")):
            head = head[: head.rindex("(")].strip()
    return head or title


def readme_table(claims: Sequence[tuple[str, str, str, str]]) -> list[str]:
    """The README's reproduction table from the summary's claims ``(page, experiment title,
    claim, verdict)``, in their order: one row per experiment, its first claim and verdict,
    and a tally of the verdicts of its other claims."""
    groups: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for page, title, claim, v in claims:
        groups.setdefault((page, title), []).append((claim, v))
    lines = ["| paper | experiment | claim | verdict | its other claims |",
             "|---|---|---|---|---|"]
    for (page, title), rows in groups.items():
        (claim, v), others = rows[0], rows[1:]
        tally: dict[str, int] = {}
        for _claim, other in others:
            key = _SHORT_VERDICT.get(other, other)
            tally[key] = tally.get(key, 0) + 1
        rest = ", ".join(f"{n} {key}" for key, n in tally.items()) or "–"
        name = "Translation" if page == "translation" else page.upper()
        lines.append(f"| [{name}](docs/results/{page}.md) | {short_title(title)} | {claim} | "
                     f"{v} | {rest} |")
    return lines


def update_readme(readme: Path, claims: Sequence[tuple[str, str, str, str]]) -> bool:
    """Rewrite the reproduction table of ``readme`` between :data:`README_START` and
    :data:`README_END`; False (and nothing written) when the file or the markers are absent."""
    if not readme.is_file():
        return False
    text = readme.read_text(encoding="utf-8")
    if README_START not in text or README_END not in text:
        return False
    head, rest = text.split(README_START, 1)
    _old, tail = rest.split(README_END, 1)
    body = "\n".join(["", *readme_table(claims), ""])
    new = f"{head}{README_START}\n{body}\n{README_END}{tail}"
    if new != text:
        readme.write_text(new, encoding="utf-8")
    return True


def summary_claims(summary: str) -> list[tuple[str, str, str, str]]:
    """The claims ``(page, experiment title, claim, verdict)`` of a summary page
    (``docs/results/README.md``) that :func:`write_pages` wrote, read back from its table."""
    out = []
    for line in summary.splitlines():
        if not line.startswith("| [") or line.count(" | ") < 6:
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        page = cells[0][1:cells[0].index("]")]
        out.append((page, cells[1], cells[2], cells[5]))
    return out


def _summary_row(page: str, title: str, claim: str, papers: str, ours: str, v: str,
                 scale_text: str) -> str:
    return f"| [{page}]({page}.md) | {title} | {claim} | {papers} | {ours} | {v} | {scale_text} |"


#: the command-line flag of each mode but the full one
_MODE_FLAG = {"quick": " --quick", "paper": " --scale paper"}

SUMMARY_HEAD = ["| paper | experiment | claim | paper's numbers (where) | ours | verdict | scale |",
                "|---|---|---|---|---|---|---|"]


def write_pages(results_dir: Path, out_dir: Path, mode: str,
                extra_sections: dict[str, list[str]] | None = None,
                extra_claims: list[tuple[str, str, str, str, str]] | None = None,
                experiments: Sequence[Experiment] | None = None,
                every: Sequence[Experiment] | None = None) -> list[Path]:
    """Write one page per paper plus ``README.md`` (the summary), every experiment's results
    in them; returns the paths. In the full mode, the reproduction table of the repository's
    README (``out_dir/../../README.md``, where it holds :data:`README_START`) too.

    Each page, and the summary, opens with its claims' table: the paper's numbers, ours and
    the verdict; the sections follow.
    ``extra_claims`` ``(page, experiment, claim, where, verdict)`` are verdicts made outside
    the experiments' tables (the speed sections), listed in the summary with their pages'.
    ``experiments``: write only the pages of these experiments, each with these experiments'
    sections alone, and no summary (a job that ran some experiments into a folder of its own).
    ``every``: the mode's experiments (default :data:`EXPERIMENTS`, ours; the paper's scale
    passes its own).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    shown = tuple(experiments if experiments is not None
                  else every if every is not None else EXPERIMENTS)
    stamp = results_stamp(results_dir, mode, shown)
    written: list[Path] = []
    rows: list[str] = []
    readme_claims: list[tuple[str, str, str, str]] = []
    total_seconds = 0.0
    for paper, title in PAGES.items():
        exps = [e for e in shown if e.paper == paper]
        if experiments is not None and not exps:
            continue
        page_stamp = results_stamp(results_dir, mode, tuple(exps))
        head = [f"# {title}", ""]
        generated = [f"Mode: **{mode}**. Generated by `ctrlrnn reproduce` from the results "
                     f"files ({page_stamp}); do not edit by hand."]
        if experiments is not None:
            generated[-1] += (" This page holds only the experiments this job ran: "
                              f"{', '.join(f'`{e.id}`' for e in exps)}.")
        page_rows = ["| experiment | claim | paper's numbers (where) | ours | verdict |",
                     "|---|---|---|---|---|"]
        body: list[str] = []
        for exp in exps:
            data = load_results(results_dir, mode, exp)
            if data:
                total_seconds += training_seconds(data)
            section, claim_verdicts = experiment_section(exp, data, out_dir, mode)
            body += section
            for c, (claim, source, v) in zip(exp.claims, claim_verdicts):
                papers, ours = claim_numbers(exp, data, c)
                papers = f"{papers} ({source})" if papers != "–" else source
                page_rows.append(f"| [{short_title(exp.title)}](#{_anchor(exp.title)}) | "
                                 f"{claim} | {papers} | {ours} | {v} |")
                rows.append(_summary_row(paper, exp.title, claim, papers, ours, v,
                                         _scale_cell(exp, mode)))
                readme_claims.append((paper, exp.title, claim, v))
        body += (extra_sections or {}).get(paper, [])
        if mode == "full" and experiments is None:
            body += paper_scale_section(paper)
        for page, title_, claim, source, v in extra_claims or []:
            if page == paper:
                rows.append(_summary_row(paper, title_, claim, source, "measured here", v,
                                         _scale_cell(None, mode)))
                page_rows.append(f"| {short_title(title_)} | {claim} | "
                                 f"{source} | measured here | {v} |")
                readme_claims.append((paper, title_, claim, v))
        lines = [*head, *page_rows, "", *generated, "", *body]
        path = out_dir / f"{paper}.md"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        written.append(path)
    if experiments is not None:
        return written
    summary: list[str] = [
        "# Reproduction results", "",
        "Each row is one claim of a paper, tested at this machine's scale over several seeds. "
        "The verdicts follow one rule, stated below the table.", "",
        *SUMMARY_HEAD, *rows, "",
        f"Training time of the experiments in these files: "
        f"{total_seconds / 60:.1f} minutes on this machine (every final run's and "
        "tuning trial's own training clock, summed; the wall time of files whose runs "
        "record none).", "",
        *(["Each experiment also holds its paper's own recipe, which `ctrlrnn reproduce "
           "--scale paper` trains (on a GPU, under torchrun across several). `ctrlrnn "
           "reproduce --list` names every table of the five papers and its experiments.", ""]
          if mode == "full" else []),
        "## The verdict rule", "", *verdicts.RULE, "",
        f"Generated by `ctrlrnn reproduce{_MODE_FLAG.get(mode, '')}` from the "
        f"results files in `{results_dir / mode}` ({stamp}); do not edit by "
        "hand.", "",
    ]
    readme = out_dir / "README.md"
    readme.write_text("\n".join(summary) + "\n", encoding="utf-8")
    written.append(readme)
    if mode == "full":
        update_readme(out_dir.parent.parent / "README.md", readme_claims)
    return written


def paper_scale_section(page: str) -> list[str]:
    """The page's tables that train at the paper's scale alone (their data cannot be had
    here), each with the files it needs, and the tables no experiment reproduces, each with
    why (:mod:`~ctrlrnn.reproduce.paper_tables`)."""
    from ctrlrnn.reproduce.paper_experiments import PAPER_ONLY
    from ctrlrnn.reproduce.paper_tables import TABLES

    alone = [e for e in PAPER_ONLY if e.paper == page]
    missing = [t for t in TABLES if t.page == page and t.missing]
    if not alone and not missing:
        return []
    lines = ["## At the paper's scale alone", ""]
    if alone:
        lines += ["These experiments' data cannot be had here. Each trains the paper's recipe "
                  "with `ctrlrnn reproduce --scale paper --only EXPERIMENT`. Its row says "
                  "which files it needs; the list below the table names them.", "",
                  "| experiment | arms (the paper's numbers) | its data |", "|---|---|---|"]
        files: dict[str, Any] = {}
        for exp in alone:
            scaled = exp.at_paper_scale()
            arms = "; ".join(f"{a.label} ({_fmt(a.paper)})" for a in scaled.arms)
            needs = exp.missing_data()
            files.update({n.name: n for n in needs})
            points = ", ".join(f"`--data {n.name}=PATH`" for n in needs)
            lines.append(f"| `{exp.id}`: {exp.title} | {arms} | needs the data: point "
                         f"{points} at it |")
        lines += ["", "The files:", ""]
        lines += [f"- `{name}`: {need.files} ({need.origin})." for name, need in files.items()]
        lines.append("")
    if missing:
        lines += ["Tables no experiment here reproduces:", ""]
        lines += [f"- {t.table} ({t.what}): {t.missing}" for t in missing]
        lines.append("")
    return lines


def _anchor(heading: str) -> str:
    """The anchor of a ``### heading`` of a page (GitHub's and the docs site's slug)."""
    text = heading.replace("`", "").strip().lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LNM")
    return kept.replace(" ", "-")
