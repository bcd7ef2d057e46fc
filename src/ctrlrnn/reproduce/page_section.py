"""One experiment's section of a results page (:func:`experiment_section`): the state of
its runs, the results table, the claims' verdicts, the figure, how the runs were set up and
the search's trials; and the numbers of a claim for the pages' claim tables
(:func:`claim_numbers`)."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ctrlrnn.metric_conventions import higher_is_better
from ctrlrnn.reproduce import paper_vs_here, verdicts
from ctrlrnn.reproduce.cache_validity import Standing
from ctrlrnn.reproduce.experiment_spec import PAPER, Experiment
from ctrlrnn.reproduce.learning_curves import curves_caption, plot_curves
from ctrlrnn.reproduce.page_cells import (
    baseline_cell,
    ceiling_why,
    claim_text,
    claim_values,
    converged_cell,
    fmt,
    mean_std_cell,
    metric_scale,
    ordered_arms,
    seconds_cell,
    seed_values,
    short_key,
    steps_cell,
    training_time_line,
    tuned_cell,
)
from ctrlrnn.reproduce.page_figure import plot_experiment
from ctrlrnn.reproduce.probe_tables import probe_lines
from ctrlrnn.reproduce.runner import slug
from ctrlrnn.reproduce.seed_spread import spread_lines
from ctrlrnn.reproduce.tuning import IN_PROGRESS, Tuning, lender_of, search_of
from ctrlrnn.reproduce.verdicts import useful_level
from ctrlrnn.tasks import TASKS, task_class


def experiment_section(exp: Experiment, data: dict[str, Any] | None, out_dir: Path,
                       mode: str) -> tuple[list[str], list[tuple[str, str, str]]]:
    """Markdown lines for one experiment and its claim verdicts ``(claim, source, verdict)``.

    The section opens with the "paper vs here" table of the full mode
    (:mod:`.paper_vs_here`), then leads with its answer: the state of its runs where they are
    not final, the results table, the claims' verdicts and the figure; then how the runs were
    set up (task, notes, stopping, search) and the search's trials."""
    scale = metric_scale(exp.metric)
    # how the stored runs evaluated and stopped: the definition they ran under (stored with them)
    standing = Standing(exp, mode, data)
    method, selected = _method_lines(exp, mode, standing, scale)
    if mode == "full":  # the probes measured the full mode's setting
        method += probe_lines(exp, out_dir / "data" / "probes")
    search = _SearchState(exp, mode, data, selected)
    method += search.method
    status = list(search.status)  # what qualifies the table: runs not final under this definition
    heading = _heading(exp, mode, data, standing)
    if data is None:
        judged = [(claim_text(c.better, c.worse, c.metric), c.source, verdicts.NOT_RUN)
                  for c in exp.claims]
        return [*heading, "", "Not run yet in this mode.", *status, *method, ""], judged
    earlier = _earlier_setting(exp, data, standing)
    progress, partial = _progress_lines(exp, mode, data, standing, earlier,
                                        tuned=search.tuning is not None)
    status += progress
    table = _results_table(exp, data, scale, earlier) + spread_lines(exp, data)
    after: list[str] = []
    if search.tuned:
        after += _trial_tables(exp, data)
    if data.get("errors"):
        after += ["", "Runs that did not finish:", ""]
        after += [f"- {k}: `{v[:300]}`" for k, v in data["errors"].items()]
    figure: list[str] = []
    png = out_dir / f"{exp.paper}-{slug(exp.id)}-{mode}.png"
    if plot_experiment(exp, data, png, scale):
        figure = ["", f"![{exp.title}]({png.name})"]
    curves = out_dir / f"{exp.paper}-{slug(exp.id)}-curves-{mode}.png"
    if plot_curves(exp, data, curves):
        figure += ["", f"![{exp.title}: validation curves]({curves.name})", "",
                   curves_caption(exp, data)]
    else:  # a figure of an earlier page that no page shows any more
        curves.unlink(missing_ok=True)

    def marks(claim: Any) -> list[str]:
        return [m for m, on in (("untuned", search.stale), ("partial", partial),
                                ("earlier setting", claim.better in earlier
                                 or claim.worse in earlier),
                                ("earlier search", claim.better in search.searched_before
                                 or claim.worse in search.searched_before))
                if on]

    claims, judged = _claims_table(exp, data, scale, marks)
    lines = [*heading, *status, *table, *claims, *figure, *method, *after, ""]
    return lines, judged


def _method_lines(exp: Experiment, mode: str, standing: Standing,
                  scale: float) -> tuple[list[str], str]:
    """How the runs were set up (task and metric, notes, evaluation limit, stopping) and the
    validation metric the stored runs were selected by."""
    unit = " (%)" if scale != 1.0 else ""
    method = ["", f"Task `{exp.task}`, metric: test {exp.metric}{unit} "
              f"({'higher' if exp.higher_is_better else 'lower'} is better). "
              f"Paper's numbers: {exp.paper_metric or 'none for this setting'}."]
    if exp.chance is not None:
        method[-1] += f" Chance level: {fmt(exp.chance * scale)}{unit.strip(' ()')}."
    if exp.note:
        method += ["", exp.note.strip()]
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
    return method, selected


class _SearchState:
    """How the stored runs stand against the search the experiment defines in this mode: the
    tuning line (``method``) or the warning that qualifies the table (``status``)."""

    def __init__(self, exp: Experiment, mode: str, data: dict[str, Any] | None,
                 selected: str) -> None:
        tuning = exp.tuning(mode)
        self.tuning = tuning
        arms = ordered_arms(exp, data or {})
        trained = [arm for _, arm in arms if arm.get("seeds")]
        # results trained before the experiment defined its tuning (an arm with seeds, no search)
        self.stale = tuning is not None and any(not arm.get("tuning") for arm in trained)
        self.tuned = tuning is not None and not self.stale and data is not None and any(
            arm.get("tuning") for _, arm in arms)
        # arms whose stored seeds trained at the choice of a search this experiment no longer
        # defines (the tuning line says which): the verdicts that read them are marked
        self.searched_before = {label for label, arm in arms
                                if tuning is not None and arm.get("seeds") and arm.get("tuning")
                                and lender_of(arm["tuning"]) is None
                                and search_of(arm["tuning"]) != tuning}
        self.method: list[str] = []
        self.status: list[str] = []
        if tuning is None:
            self.method = ["", "Tuning: none in this mode (every arm at the same learning rate)."]
        elif not self.stale:
            self.method = ["", _tuning_line(exp, tuning, trained, selected)
                           + _borrowing_line(exp, mode)]
        elif any(arm.get("tuning") for arm in trained):
            self.status = [
                "", f"**Partly untuned results.** The arms without a search in the table "
                f"ran before this experiment defined its equal tuning ({tuning.describe()}), "
                "all at one learning rate; the verdicts are marked *untuned* until "
                f"`ctrlrnn reproduce --only {exp.id}` has trained every arm again."]
        else:
            self.status = [
                "", f"**Untuned results.** These runs predate the equal tuning this "
                f"experiment now defines ({tuning.describe()}): every arm trained at the "
                "same learning rate, and their verdicts are marked *untuned*. `ctrlrnn "
                f"reproduce --only {exp.id}` replaces them."]


def _heading(exp: Experiment, mode: str, data: dict[str, Any] | None,
             standing: Standing) -> list[str]:
    """The section's title, with the "paper vs here" table and the paper-scale lines of the
    modes that show them."""
    heading = [f"### {exp.title}"]
    setup = paper_vs_here.table(exp, mode, data, standing) if mode in ("full", PAPER) else []
    if setup:  # how the paper ran it and how we do, row by row, from the definition
        heading += ["", *setup]
    scale_lines = paper_vs_here.paper_scale_lines(exp) if mode == "full" else []
    if scale_lines:
        heading += ["", " ".join(scale_lines)]
    return heading


def _progress_lines(exp: Experiment, mode: str, data: dict[str, Any], standing: Standing,
                    earlier: list[str], *, tuned: bool) -> tuple[list[str], bool]:
    """The warnings on runs not final yet (an earlier setting, runs in progress, a search
    under way), and whether the final runs are partial."""
    status: list[str] = []
    if earlier:
        status += ["", f"**Earlier setting.** Stored runs of {', '.join(earlier)} trained in a "
                   "setting this experiment no longer defines (a model or data size, the "
                   "batch, the evaluation limit, the selecting metric or an arm's argument has "
                   "changed since); they "
                   "and the verdicts that read them are marked "
                   f"*earlier setting* until `ctrlrnn reproduce --only {exp.id}` has trained "
                   "them again."]
    defined = {a.label: a for a in exp.arms}
    planned = len(exp.arms) * len(exp.seeds(mode))
    finished = sum(_current_runs(arm, tuned, lambda s, label=label: not standing
                                 .other_setting(defined[label], s))
                   for label, arm in ordered_arms(exp, data))
    partial = not data.get("complete") and finished < planned
    if partial:
        status += ["", f"**In progress**: {finished} of the {planned} final runs are finished "
                   f"(their verdicts are marked *partial*); `ctrlrnn reproduce --only {exp.id}` "
                   "continues from the results file."]
    # a search stored for an arm that now trains at another's values is no longer under way
    searching = [(label, arm[IN_PROGRESS]) for label, arm in ordered_arms(exp, data)
                 if isinstance(arm.get(IN_PROGRESS), dict) and not data.get("complete")
                 and exp.values_from(defined[label], mode) is None]
    if searching:
        status += ["", "**Search under way**: " + "; ".join(
            f"{label}, {len(record.get('trials') or [])} of {record.get('trials_planned')} "
            "trials" for label, record in searching) + " finished (the results file holds "
            f"them; `ctrlrnn reproduce --only {exp.id}` continues the search from there). Until "
            "an arm's search and seeds are finished, its row below is its earlier result."]
    return status, partial


def _results_table(exp: Experiment, data: dict[str, Any], scale: float,
                   earlier: list[str]) -> list[str]:
    """The results table: one row per arm, with the training time line below it."""
    defined = {a.label: a for a in exp.arms}
    also_heads = "".join(f" test {m}: ours (paper) |" for m in exp.also)
    table = ["", f"| arm | paper | ours: mean ± std (seeds) |{also_heads} valid {exp.metric} "
             "| steps "
             "(best) | converged | tuned (trials) | train s | parameters |",
             "|---" * (9 + len(exp.also)) + "|"]
    paper_also = {a.label: a.paper_also for a in exp.arms}
    for label, arm in ordered_arms(exp, data):  # the paper's numbers: the definition's
        vals = seed_values(arm, scale)
        also_cells = ""
        for metric in exp.also:
            also_cells += (f" {mean_std_cell(seed_values(arm, metric_scale(metric), metric))} "
                           f"({fmt(paper_also.get(label, {}).get(metric))}) |")
        seeds = list(arm.get("seeds", {}).values())
        valid = [scale * x["valid"] for x in seeds if x.get("valid") is not None]
        params = seeds[0].get("parameters") if seeds else None
        shown_label = f"{label} (earlier setting)" if label in earlier else label
        table.append(
            f"| {shown_label} | {fmt(defined[label].paper)} | {mean_std_cell(vals)} "
            f"({len(vals)}) |"
            f"{also_cells} {fmt(statistics.fmean(valid) if valid else None)} | "
            f"{steps_cell(seeds)} | {converged_cell(seeds)} | "
            f"{tuned_cell(arm.get('tuning'))} | {seconds_cell(seeds)} | {params or '–'} |"
        )
    return table + training_time_line(data)


def _claims_table(exp: Experiment, data: dict[str, Any], scale: float,
                  marks: Callable[[Any], list[str]]
                  ) -> tuple[list[str], list[tuple[str, str, str]]]:
    """The claims' table and their verdicts ``(claim, source, verdict)``, each verdict with the
    ``marks`` that qualify it."""
    claims = ["", "| claim (paper) | where | baseline: ours / paper | at our scale |",
              "|---|---|---|---|"]
    judged: list[tuple[str, str, str]] = []
    arms = data.get("arms", {})
    paper_of = {a.label: a for a in exp.arms}
    for c in exp.claims:
        main = not c.metric or c.metric == exp.metric
        metric = exp.metric if main else c.metric
        higher = higher_is_better(metric, exp.metric, exp.higher_is_better)
        unit_scale = scale if main else metric_scale(metric)
        worse_arm = paper_of.get(c.worse)
        paper = None
        if worse_arm is not None:
            paper = worse_arm.paper if main else worse_arm.paper_also.get(metric)
        worse_values = [v * unit_scale for v in
                        claim_values(exp, arms.get(c.worse, {}), c.metric)]
        better_values = [v * unit_scale for v in
                         claim_values(exp, arms.get(c.better, {}), c.metric)]
        level = useful_level(exp.chance if main else None, metric,
                             exp.useful if main else None)
        v = verdicts.verdict(better_values, worse_values, higher,
                             useful=level * unit_scale if level is not None else None,
                             baseline_paper=paper if exp.paper_comparable else None,
                             converged=_claim_converged(arms, c))
        text = claim_text(c.better, c.worse, c.metric)
        on = marks(c)
        mark = f" ({', '.join(on)})" if on and v != verdicts.NOT_RUN else ""
        shown = f"**{v}**{mark}"
        judged.append((text, c.source, v + mark))
        baseline = baseline_cell(worse_values, paper, higher)
        if v == verdicts.BASELINE_LOW:
            baseline += " " + ceiling_why(list(arms.get(c.worse, {}).get("seeds", {}).values()))
        claims.append(f"| {text} | {c.source} | {baseline} "
                      f"| {shown} |")
    return claims, judged


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
    unit_scale = metric_scale(metric)
    paper_of = {a.label: a for a in exp.arms}

    def paper(label: str) -> str:
        arm = paper_of.get(label)
        if arm is None:
            return "–"
        return fmt(arm.paper if main else arm.paper_also.get(metric))

    arms = (data or {}).get("arms", {})

    def ours(label: str) -> str:
        values = [v * unit_scale for v in claim_values(exp, arms.get(label, {}), claim.metric)]
        return mean_std_cell(values) if values else "–"

    papers = f"{paper(claim.better)} vs {paper(claim.worse)}"
    return ("–" if papers == "– vs –" else papers), f"{ours(claim.better)} vs {ours(claim.worse)}"


def scale_cell(exp: Experiment | None, mode: str) -> str:
    """How our setting compares with the paper's: its task and size, or not."""
    if mode == "quick":
        return "quick: small models, short runs"
    if exp is None:
        return "this machine's CPU"
    return "the paper's task and size" if exp.paper_comparable else "smaller or other data"


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
    return [label for label, entry in ordered_arms(exp, data)
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
    tie = "" if selected == "loss" else (
        " (an equal value with a lower validation loss improves; runs finished before "
        "2026-12-06 09:00 UTC kept the earlier evaluation)")
    if overrides.get("patience"):
        return (f"Stopping: evaluated {every}; a run stops when the validation {selected} has "
                f"not improved{tie} for {overrides['patience']} evaluations, or at the cap "
                f"of {cap} (then it is marked *not converged*); the test split is scored at the "
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


def _borrowing_line(exp: Experiment, mode: str) -> str:
    """`` X and Y train at Z's chosen values ...`` for the arms with no search of their own
    (:attr:`Arm.tuned_like`), or ""."""
    lenders: dict[str, list[str]] = {}
    for arm in exp.arms:
        lender = exp.values_from(arm, mode)
        if lender is not None:
            lenders.setdefault(lender, []).append(arm.label)
    return "".join(f" Without a search of {'its' if len(labels) == 1 else 'their'} own, "
                   f"{_words(labels)} {'trains' if len(labels) == 1 else 'train'} at "
                   f"{lender}'s chosen values, changing one component of that configuration."
                   for lender, labels in lenders.items())


def _words(labels: list[str]) -> str:
    return labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " and " + labels[-1]


def _trial_tables(exp: Experiment, data: dict[str, Any]) -> list[str]:
    """Every arm's trial table: proposed values, validation score (of the metric the search
    selected by), steps and how it stopped."""
    arms = ordered_arms(exp, data)
    # records from before searches stored their metric were scored by the main one
    scored_by = {str((arm.get("tuning") or {}).get("metric") or exp.metric) for _, arm in arms
                 if arm.get("tuning")}
    heading = "valid " + (" / ".join(sorted(scored_by)) or exp.metric)
    lines = ["", "<details><summary>Tuning trials (validation split)</summary>", "",
             f"| arm | trial | values | {heading} | steps (best) | stopped by |",
             "|---|---|---|---|---|---|"]
    for label, arm in arms:
        table = arm.get("tuning") or {}
        scale = metric_scale(str(table.get("metric") or exp.metric))
        for row in table.get("trials", []):
            values = ", ".join(f"{short_key(k)} {v:.3g}"
                               for k, v in sorted(row.get("params", {}).items()))
            best = " **(chosen)**" if row.get("trial") == table.get("best_trial") else ""
            valid = row.get("valid")
            lines.append(
                f"| {label} | {row.get('trial')}{best} | {values} | "
                f"{fmt(valid * scale if isinstance(valid, (int, float)) else None)} | "
                f"{row.get('steps')} ({row.get('best_step')}) | {row.get('stop_reason')} |")
    return [*lines, "", "</details>"]
