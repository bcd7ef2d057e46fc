"""``ctrlrnn reproduce``: run the papers' experiments and write ``docs/results/``.

    ctrlrnn reproduce --quick          # about 10 minutes, small models: docs/results/quick
    ctrlrnn reproduce                  # the full mode: hours; resumable, finished work cached
    ctrlrnn reproduce --only rcrn-     # experiments whose id contains a pattern
    ctrlrnn reproduce --pages-only     # rewrite the pages from the results files
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def run(args: argparse.Namespace) -> int:
    from ctrlrnn.reproduce.experiments import EXPERIMENTS
    from ctrlrnn.reproduce.pages import write_pages
    from ctrlrnn.reproduce.runner import run_experiment

    mode = "quick" if args.quick else "full"
    default_docs = "docs/results/quick" if mode == "quick" else "docs/results"
    results, runs = Path(args.results), Path(args.runs)
    docs = Path(args.docs if args.docs is not None else default_docs)
    docs.mkdir(parents=True, exist_ok=True)
    chosen = [e for e in EXPERIMENTS if not args.only or any(p in e.id for p in args.only)]
    if args.only and not chosen:
        known = ", ".join(e.id for e in EXPERIMENTS)
        print(f"ctrlrnn reproduce: --only matches no experiment (known: {known})")
        return 2
    started = time.perf_counter()
    if not args.pages_only:
        for i, exp in enumerate(chosen, 1):
            print(f"[reproduce] ({i}/{len(chosen)}) {exp.id}: {exp.title}")
            run_experiment(exp, mode, runs, results, show_progress=not args.no_progress)
    speed_sections = {}
    if not args.pages_only and not args.no_speed:
        from ctrlrnn.reproduce.speed import run_speed

        speed_sections = run_speed(mode, results, docs)
    else:
        from ctrlrnn.reproduce.speed import speed_sections_from_results

        speed_sections = speed_sections_from_results(mode, results, docs)
    from ctrlrnn.reproduce.figures import cas_gate_section, depth_gate_section

    if not args.only or any("metagross" in e.id for e in chosen):
        speed_sections = dict(speed_sections)
        speed_sections["metagross"] = [*speed_sections.get("metagross", []),
                                       *depth_gate_section(mode, runs, docs)]
    if not args.only or any("cas-" in e.id for e in chosen):
        speed_sections = dict(speed_sections)
        speed_sections["cas-lstm"] = [*speed_sections.get("cas-lstm", []),
                                      *cas_gate_section(mode, runs, docs)]
    from ctrlrnn.reproduce.speed import speed_claims

    pages = write_pages(results, docs, mode, speed_sections,
                        tuple(chosen) if args.only else None, speed_claims(mode, results))
    print(f"[reproduce] {mode} mode done in {(time.perf_counter() - started) / 60:.1f} min; "
          f"pages: {', '.join(str(p) for p in pages)}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("reproduce", help="run the papers' experiments and write docs/results")
    p.add_argument("--quick", action="store_true", help="the quick mode (about 10 minutes)")
    p.add_argument("--only", action="append", metavar="PATTERN",
                   help="only experiments whose id contains PATTERN (repeatable)")
    p.add_argument("--runs", default="runs/reproduce", help="where the training runs go")
    p.add_argument("--results", default="docs/results/data",
                   help="where the results files go (the pages are written from them)")
    p.add_argument("--docs", default=None,
                   help="where the pages go (default: docs/results for the full mode, "
                        "docs/results/quick for the quick mode)")
    p.add_argument("--pages-only", action="store_true", help="only rewrite the pages")
    p.add_argument("--no-speed", action="store_true", help="skip the speed measurements")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=run)
