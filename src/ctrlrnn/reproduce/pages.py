"""Results pages: ``docs/results/<paper>.md`` written from the results files, never by hand.

For each experiment: a table with the paper's number (on the paper's data, for reference),
our mean and spread over seeds on the test split, the validation score, the optimizer steps,
whether the runs converged (stopped by their patience rather than the step cap) and the
training seconds (mean over seeds, only for runs that had the machine to themselves) and the
parameter count; a bar chart from zero with the seed spread and the paper's numbers; and a
verdict for each ordering the paper claims, by the one rule of :mod:`.verdicts`, stated on
the summary page.

This module writes the pages and the summary (:func:`write_pages`); an experiment's section
is :mod:`.page_section`, its cells :mod:`.page_cells`, its figure :mod:`.page_figure`, and
the README's table :mod:`.readme_results`.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctrlrnn.reproduce import verdicts
from ctrlrnn.reproduce.experiment_spec import PAGES, Experiment
from ctrlrnn.reproduce.experiments import EXPERIMENTS
from ctrlrnn.reproduce.page_cells import (
    OWN_MACHINE_EXTRA_LOAD,
    OWN_MACHINE_SHARE,
    fmt,
    training_seconds,
)
from ctrlrnn.reproduce.page_cells import ceiling_why as _ceiling_why
from ctrlrnn.reproduce.page_cells import converged_cell as _converged_cell
from ctrlrnn.reproduce.page_cells import mean_std_cell as _mean_std_cell
from ctrlrnn.reproduce.page_cells import seconds_cell as _seconds_cell
from ctrlrnn.reproduce.page_cells import training_time_line as _training_time_line
from ctrlrnn.reproduce.page_section import claim_numbers, experiment_section, scale_cell
from ctrlrnn.reproduce.readme_results import (
    README_END,
    README_START,
    readme_table,
    short_title,
    summary_claims,
    update_readme,
)
from ctrlrnn.reproduce.runner import is_cached, load_results

__all__ = ["EXPERIMENTS", "OWN_MACHINE_EXTRA_LOAD", "OWN_MACHINE_SHARE", "PAGES", "README_END",
           "README_START", "SUMMARY_HEAD", "_ceiling_why", "_converged_cell", "_mean_std_cell",
           "_seconds_cell", "_training_time_line", "claim_numbers", "experiment_section",
           "paper_scale_section", "readme_table", "results_stamp", "short_title",
           "summary_claims", "training_seconds", "update_readme", "write_pages"]


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


def _summary_row(page: str, title: str, claim: str, papers: str, ours: str, v: str,
                 scale_text: str) -> str:
    return f"| [{page}]({page}.md) | {title} | {claim} | {papers} | {ours} | {v} | {scale_text} |"


#: the command-line flag of each mode but the full one
_MODE_FLAG = {"quick": " --quick", "paper": " --scale paper"}


SUMMARY_HEAD = ["| paper | experiment | claim | paper's numbers (where) | ours | verdict | scale |",
                "|---|---|---|---|---|---|---|"]


@dataclass
class _Summary:
    """What the pages gather for the summary page and the README's table."""

    #: the summary's rows, one per claim
    rows: list[str] = field(default_factory=list)
    #: ``(page, experiment title, claim, verdict)`` for the README's table
    readme_claims: list[tuple[str, str, str, str]] = field(default_factory=list)
    #: the training seconds the results files record
    total_seconds: float = 0.0

    def add(self, paper: str, title: str, claim: str, papers: str, ours: str, v: str,
            scale_text: str) -> None:
        self.rows.append(_summary_row(paper, title, claim, papers, ours, v, scale_text))
        self.readme_claims.append((paper, title, claim, v))


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
    summary = _Summary()
    for paper, title in PAGES.items():
        exps = [e for e in shown if e.paper == paper]
        if experiments is not None and not exps:
            continue
        lines = _paper_page(paper, title, exps, results_dir, out_dir, mode, summary,
                            extra_sections=(extra_sections or {}).get(paper, []),
                            extra_claims=[c for c in extra_claims or [] if c[0] == paper],
                            only_these=experiments is not None)
        path = out_dir / f"{paper}.md"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        written.append(path)
    if experiments is not None:
        return written
    readme = out_dir / "README.md"
    readme.write_text("\n".join(_summary_page(results_dir, mode, stamp, summary)) + "\n",
                      encoding="utf-8")
    written.append(readme)
    if mode == "full":
        update_readme(out_dir.parent.parent / "README.md", summary.readme_claims)
    return written


def _paper_page(paper: str, title: str, exps: list[Experiment], results_dir: Path,
                out_dir: Path, mode: str, summary: _Summary, *, extra_sections: list[str],
                extra_claims: list[tuple[str, str, str, str, str]],
                only_these: bool) -> list[str]:
    """The lines of one paper's page: its claims' table, then its experiments' sections
    (their claims also go to ``summary``). ``only_these``: a page of a job that ran only
    ``exps``, which says so and holds no paper-scale section."""
    page_stamp = results_stamp(results_dir, mode, tuple(exps))
    generated = [f"Mode: **{mode}**. Generated by `ctrlrnn reproduce` from the results "
                 f"files ({page_stamp}); do not edit by hand."]
    if only_these:
        generated[-1] += (" This page holds only the experiments this job ran: "
                          f"{', '.join(f'`{e.id}`' for e in exps)}.")
    page_rows = ["| experiment | claim | paper's numbers (where) | ours | verdict |",
                 "|---|---|---|---|---|"]
    body: list[str] = []
    for exp in exps:
        data = load_results(results_dir, mode, exp)
        if data:
            summary.total_seconds += training_seconds(data)
        section, claim_verdicts = experiment_section(exp, data, out_dir, mode)
        body += section
        for c, (claim, source, v) in zip(exp.claims, claim_verdicts):
            papers, ours = claim_numbers(exp, data, c)
            papers = f"{papers} ({source})" if papers != "–" else source
            page_rows.append(f"| [{short_title(exp.title)}](#{_anchor(exp.title)}) | "
                             f"{claim} | {papers} | {ours} | {v} |")
            summary.add(paper, exp.title, claim, papers, ours, v, scale_cell(exp, mode))
    body += extra_sections
    if mode == "full" and not only_these:
        body += paper_scale_section(paper)
    for _page, title_, claim, source, v in extra_claims:
        summary.add(paper, title_, claim, source, "measured here", v, scale_cell(None, mode))
        page_rows.append(f"| {short_title(title_)} | {claim} | "
                         f"{source} | measured here | {v} |")
    return [f"# {title}", "", *page_rows, "", *generated, "", *body]


def _summary_page(results_dir: Path, mode: str, stamp: str, summary: _Summary) -> list[str]:
    """The lines of the summary page (``README.md`` of the results folder)."""
    return [
        "# Reproduction results", "",
        "Each row is one claim of a paper, tested at this machine's scale over several seeds. "
        "The verdicts follow one rule, stated below the table.", "",
        *SUMMARY_HEAD, *summary.rows, "",
        f"Training time of the experiments in these files: "
        f"{summary.total_seconds / 60:.1f} minutes on this machine (every final run's and "
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
            arms = "; ".join(f"{a.label} ({fmt(a.paper)})" for a in scaled.arms)
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
