"""``ctrlrnn reproduce``: run the papers' experiments and write ``docs/results/``.

    ctrlrnn reproduce --quick          # small models: docs/results/quick
    ctrlrnn reproduce                  # the full mode: hours; resumable, finished work cached
    ctrlrnn reproduce --only rcrn-     # experiments whose id contains a pattern
    ctrlrnn reproduce --rerun rcrn-mr  # train an experiment again (``all``: every one)
    ctrlrnn reproduce --pages-only     # rewrite the pages from the results files
    ctrlrnn reproduce --estimate 50 --only carnn-lm   # time 50 steps an arm: the cost here
    ctrlrnn reproduce --only qrnn-ptb-lm --pages chosen --docs runs/main   # its page alone
    ctrlrnn reproduce --jobs 2         # two runs at once, one torch thread each
    ctrlrnn reproduce --storage postgresql://host/db   # on each machine: the work is shared
    ctrlrnn reproduce --list           # every table of the five papers and its experiments
    ctrlrnn reproduce --status         # what is trained, under way and left, arm by arm
    ctrlrnn reproduce --scale paper --only qrnn-imdb --data imdb=~/aclImdb   # the paper's recipe

``--scale paper`` trains each experiment as its paper did (:mod:`.paper_scales`), on a GPU
where there is one, under ``torchrun`` across several (rank 0 keeps the books), reading the
data a paper used that cannot be had here from the user's files (``--data NAME=PATH``); its
results go to ``RESULTS/paper`` and its pages to ``docs/results/paper``, apart from ours.

Finished experiments are cached in the results files (``docs/results/data``); the pages are
rewritten only when something was trained or measured anew, or with ``--pages-only``, and
they are written from the results files alone (the figures too), so a checkout whose results
are all cached is left as it is. ``--only`` limits what is trained, not what the pages show:
they are written whole, from every results file, unless ``--pages chosen`` asks for the pages
of the chosen experiments alone (their sections only, no summary: a job writing into a folder
of its own).
"""

from __future__ import annotations

import argparse
import shlex
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import torch

from ctrlrnn.interrupts import exit_status, interrupted_words, say_stop, stopped_by
from ctrlrnn.reproduce import experiments, parallel, runner
from ctrlrnn.reproduce.estimate import estimate
from ctrlrnn.reproduce.experiment_spec import PAPER, Experiment
from ctrlrnn.reproduce.figures import cas_gate_section, depth_gate_section
from ctrlrnn.reproduce.pages import write_pages
from ctrlrnn.reproduce.speed import (
    forget_speed,
    missing_speed_parts,
    run_speed,
    speed_claims,
    speed_sections_from_results,
)
from ctrlrnn.reproduce.status import status_lines

#: the ``--rerun`` name of the speed measurements
SPEED = "speed"


def _rerun_set(names: list[str] | None, known: list[str]) -> set[str] | str:
    """The experiments (and ``speed``) to run again; an error message for an unknown name."""
    if not names:
        return set()
    if "all" in names:
        return {*known, SPEED}
    unknown = [n for n in names if n not in known and n != SPEED]
    if unknown:
        return (f"--rerun: unknown experiment {', '.join(map(repr, unknown))} (known: all, "
                f"{SPEED}, {', '.join(known)})")
    return set(names)


def _without_rerun(argv: list[str]) -> list[str]:
    """``argv`` less its ``--rerun`` options (a continued run must not start over)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--rerun":
            skip = True
        elif not arg.startswith("--rerun="):
            out.append(arg)
    return out


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM or SIGHUP (ctrlrnn.interrupts)
        signum = stopped_by(exc)
        command = shlex.join(["ctrlrnn", *_without_rerun(getattr(args, "argv", None) or [])])
        say_stop(f"ctrlrnn reproduce: {interrupted_words(signum)}; finished runs are cached and "
                 f"the interrupted one resumes from its checkpoint: {command}")
        return exit_status(signum)


class _Refused(Exception):
    """A command the arguments refuse: each line is said, and the exit status is 2."""

    def __init__(self, *lines: str) -> None:
        super().__init__(lines[0] if lines else "")
        self.lines = lines


def _run(args: argparse.Namespace) -> int:
    from ctrlrnn.reproduce import paper_run

    if getattr(args, "list", False):
        scale = getattr(args, "scale", "ours") or "ours"
        print(paper_run.listing(scale if getattr(args, "scale", None) else None))
        return 0
    try:
        return _run_chosen(args, paper_run)
    except _Refused as refused:
        for line in refused.lines:
            print(f"ctrlrnn reproduce: {line}")
        return 2


def _scale_and_mode(args: argparse.Namespace, paper_run: ModuleType
                    ) -> tuple[Sequence[Experiment], str, str, dict[str, str]]:
    """The mode's experiments, the mode, its default pages folder and the ``--data`` paths."""
    scale = getattr(args, "scale", "ours") or "ours"
    data = paper_run.parse_data(getattr(args, "data", None) or [])
    if isinstance(data, str):
        raise _Refused(data)
    if scale == PAPER:
        if args.quick:
            raise _Refused("--scale paper is the paper's recipe; drop --quick")
        registered = paper_run.registered_data()
        if isinstance(registered, str):
            raise _Refused(registered)
        data = {**registered, **data}  # a --data on the command line wins
        return experiments.at_scale(PAPER, data), PAPER, "docs/results/paper", data
    if data:
        raise _Refused("--data is read at the paper's scale; add --scale paper")
    mode = "quick" if args.quick else "full"
    return (experiments.EXPERIMENTS, mode,
            "docs/results/quick" if mode == "quick" else "docs/results", data)


def _chosen(args: argparse.Namespace, every: Sequence[Experiment],
            rerun: set[str]) -> list[Experiment]:
    """The experiments ``--only`` and ``--rerun`` name (all without ``--only``)."""
    ids = {e.id for e in every}
    # a pattern that is an experiment's id names that one alone (metagross-sort, not -sort5)
    chosen = [e for e in every  # --rerun names an experiment: it is chosen too
              if not args.only or e.id in rerun or any(
                  e.id == p if p in ids else p in e.id for p in args.only)]
    if args.only and not chosen:
        known = ", ".join(e.id for e in every)
        raise _Refused(f"--only matches no experiment (known: {known})")
    return chosen


def _run_chosen(args: argparse.Namespace, paper_run: ModuleType) -> int:
    every, mode, default_docs, data = _scale_and_mode(args, paper_run)
    results, runs = Path(args.results), Path(args.runs)
    docs = Path(args.docs if args.docs is not None else default_docs)
    rerun = _rerun_set(args.rerun, [e.id for e in every])
    if isinstance(rerun, str):
        raise _Refused(rerun)
    chosen = _chosen(args, every, rerun)
    if getattr(args, "status", False):
        if args.pages_only or rerun or args.estimate is not None:
            raise _Refused("--status only reads; drop --pages-only, --rerun and --estimate")
        print("\n".join(status_lines(chosen, mode, results, runs)))
        return 0
    if mode == PAPER and not args.pages_only:
        missing = paper_run.missing_data(chosen, data)
        if missing:
            raise _Refused(*missing, "nothing trained; supply the files above, or leave those "
                           "experiments out with --only")
    if paper_run.world_size() > 1:
        status = _distributed(args, paper_run, chosen, mode, runs, results, rerun)
        if status is not None:
            return status
    if args.estimate is not None:
        if args.pages_only or rerun:
            raise _Refused("--estimate only measures; drop --pages-only and --rerun")
        try:
            estimate(chosen, mode, runs, args.estimate, show_progress=not args.no_progress)
        except ValueError as exc:
            raise _Refused(str(exc)) from exc
        return 0
    if args.pages_only and rerun:
        raise _Refused("--pages-only trains nothing; drop --rerun or --pages-only")
    for name, value in (("--jobs", args.jobs), ("--threads", args.threads)):
        if value is not None and value < 1:
            raise _Refused(f"{name}: expected a positive number, got {value}")
    started = time.perf_counter()
    changed = bool(args.pages_only)
    failed: dict[str, dict[str, str]] = {}
    if args.pages_only:  # curves of runs trained before the results files kept them
        for exp in chosen:
            runner.add_run_curves(exp, mode, runs, results)
    if not args.pages_only:
        changed = _train(args, chosen, mode, runs, results, rerun, failed) or changed
    if not args.pages_only and not args.no_speed and mode != PAPER:
        if SPEED in rerun:
            forget_speed(mode, results)
        if missing_speed_parts(mode, results):
            changed = True
            run_speed(mode, results, docs)
    if not changed:
        print(f"[reproduce] {mode} mode: every experiment is cached in {results / mode}; "
              "nothing trained, pages left as they are (--rerun EXPERIMENT|all trains again, "
              "--pages-only rewrites the pages)")
        return 0
    # every page, from every results file: ``--only`` limits what is trained, not what the
    # pages show (a page written from the chosen experiments alone would drop the others'),
    # unless the pages of the chosen experiments alone are asked for
    own = getattr(args, "pages", "all") == "chosen"
    if mode == PAPER:
        pages = write_pages(results, docs, mode, {}, experiments=chosen if own else None,
                            every=every)
    else:
        pages = write_all_pages(mode, results, docs, chosen if own else None)
    print(f"[reproduce] {mode} mode done in {(time.perf_counter() - started) / 60:.1f} min; "
          f"pages: {', '.join(str(p) for p in pages)}")
    return _report_failures(failed)


def _distributed(args: argparse.Namespace, paper_run: ModuleType, chosen: list[Experiment],
                 mode: str, runs: Path, results: Path, rerun: set[str]) -> int | None:
    """Under ``torchrun``: the exit status of a process other than rank 0 (it trains beside
    rank 0, which keeps the books), or None on rank 0, which goes on."""
    problem = paper_run.check_distributed(chosen, mode, args)
    if problem:
        raise _Refused(problem)
    if args.pages_only:
        if not paper_run.is_main():
            return 0
    else:
        paper_run.keep_one_process_group()
    if not paper_run.is_main():  # rank 0 keeps the books; the others train beside it
        if mode == PAPER:
            from ctrlrnn.reproduce.preflight import data_problems

            data_problems(chosen, mode, runs, show_progress=False)
        return paper_run.follow(chosen, mode, runs, results, rerun)
    return None


def _train(args: argparse.Namespace, chosen: list[Experiment], mode: str, runs: Path,
           results: Path, rerun: set[str], failed: dict[str, dict[str, str]]) -> bool:
    """Train the chosen experiments not cached (those ``--rerun`` names again), recording the
    failed parts in ``failed``; whether any was trained."""
    threads = args.threads or parallel.default_threads(args.jobs)
    for exp in chosen:
        if exp.id in rerun:
            runner.forget(exp, mode, runs, results)
    from ctrlrnn.reproduce.preflight import data_problems  # the data layer: `train` extra

    to_train = [e for e in chosen if not runner.is_cached(results, mode, e)]
    problems = data_problems(to_train, mode, runs, show_progress=not args.no_progress)
    if problems:
        raise _Refused(*(f"{exp_id}: its data cannot be set up here: {problem}"
                         for exp_id, problem in problems.items()),
                       "nothing trained; fix the above, or leave those experiments out with "
                       "--only")
    changed = False
    for i, exp in enumerate(chosen, 1):
        print(f"[reproduce] ({i}/{len(chosen)}) {exp.id}: {exp.title}")
        if exp in to_train:
            changed = True
        if exp in to_train and args.jobs > 1:
            parallel.prefetch(exp, mode, runs, results, args.jobs, threads)
        elif args.threads:
            torch.set_num_threads(threads)
        try:
            data = runner.run_experiment(exp, mode, runs, results,
                                         show_progress=not args.no_progress,
                                         storage=args.storage)
        except ValueError as exc:
            if not str(exc).startswith("--storage"):
                raise
            raise _Refused(str(exc)) from exc
        if data.get("errors"):
            failed[exp.id] = data["errors"]
    return changed


def _report_failures(failed: dict[str, dict[str, str]]) -> int:
    """Print every failed part of the experiments and give the exit status: 1 when any failed
    (their earlier results are kept; a later run retries them), else 0."""
    for exp_id, errors in failed.items():
        for part, error in errors.items():
            print(f"[reproduce] FAILED {exp_id} {part}: {error.splitlines()[-1][:300]}")
    if failed:
        print(f"[reproduce] {len(failed)} experiment(s) had failures; run again to retry them")
    return 1 if failed else 0


def write_all_pages(mode: str, results: Path, docs: Path,
                    experiments: list[Experiment] | None = None) -> list[Path]:
    """Write every page of ``mode`` from the results files: the experiments' tables, the speed
    sections and the gate figures. ``experiments``: only their pages, with their sections and
    figures alone (no speed sections, no summary)."""
    docs.mkdir(parents=True, exist_ok=True)
    ids = None if experiments is None else {e.id for e in experiments}
    sections = dict(speed_sections_from_results(mode, results, docs)) if ids is None else {}
    sections["metagross"] = [*sections.get("metagross", []),
                             *depth_gate_section(mode, results, docs, ids)]
    sections["cas-lstm"] = [*sections.get("cas-lstm", []),
                            *cas_gate_section(mode, results, docs, ids)]
    claims = speed_claims(mode, results) if ids is None else []
    return write_pages(results, docs, mode, sections, extra_claims=claims,
                       experiments=experiments)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("reproduce", help="run the papers' experiments and write docs/results")
    p.add_argument("--quick", action="store_true",
                   help="the quick mode (small models; see the README for its time)")
    p.add_argument("--scale", choices=("ours", PAPER), default=None,
                   help="ours: this machine's scale (the default; --quick its small mode); "
                        "paper: each paper's own recipe, on a GPU where there is one, and "
                        "under torchrun across several")
    p.add_argument("--list", action="store_true",
                   help="list every table of the five papers and the experiments that "
                        "reproduce it at each scale (with --scale: that scale's)")
    p.add_argument("--data", action="append", metavar="NAME=PATH",
                   help="at the paper's scale: the user's files of data set NAME (the "
                        "experiments' pages and --list name each; repeatable)")
    p.add_argument("--only", action="append", metavar="PATTERN",
                   help="only the experiment PATTERN, or those whose id contains PATTERN "
                   "(repeatable)")
    p.add_argument("--rerun", action="append", metavar="EXPERIMENT",
                   help="train EXPERIMENT again from scratch, its cached results and runs set "
                        f"aside ('{SPEED}': measure the speed sections again; 'all': "
                        "everything; repeatable)")
    p.add_argument("--runs", default="runs/reproduce", help="where the training runs go")
    p.add_argument("--results", default="docs/results/data",
                   help="where the results files go (the pages are written from them)")
    p.add_argument("--docs", default=None,
                   help="where the pages go (default: docs/results for the full mode, "
                        "docs/results/quick for the quick mode)")
    p.add_argument("--pages-only", action="store_true",
                   help="only rewrite the pages from the results files (after adding to "
                        "them the validation curves of the runs under --runs they lack)")
    p.add_argument("--pages", choices=("all", "chosen"), default="all",
                   help="all: every page and the summary, from every results file (default); "
                        "chosen: only the pages of the experiments --only chose, with their "
                        "sections alone and no summary")
    p.add_argument("--estimate", type=int, default=None, metavar="STEPS",
                   help="train nothing to keep: time STEPS steps of every arm of the chosen "
                        "experiments and print what their search and seeds would cost here "
                        "at most (every run to its cap)")
    p.add_argument("--status", action="store_true",
                   help="train nothing: say, arm by arm, what the results files hold under "
                        "the experiments' definitions now (searches finished or under way, "
                        "seeds trained) and which runs are training now")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="train N runs at once, in worker processes (default 1: one at a time)")
    p.add_argument("--threads", type=int, default=None, metavar="T",
                   help="torch threads per run (default: the CPUs shared out among the jobs); "
                        "a run's numbers depend on it, not on --jobs")
    p.add_argument("--storage", default=None, metavar="URL",
                   help="share the searches' trials and the seeds' runs with every process "
                        "given the same Optuna storage URL (sqlite:///FILE on one machine, "
                        "postgresql://... across machines); each trains what no other has")
    p.add_argument("--no-speed", action="store_true", help="skip the speed measurements")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=run)
