"""``ctrlrnn bench``: time ctrlrnn layers against torch.nn.LSTM/GRU and the measured roofline.

Examples::

    ctrlrnn bench                       # the quick grid (BENCHMARKS.md says how long it took)
    ctrlrnn bench --full                # the full grid of batch x length x width
    ctrlrnn bench --only qrnn --only scan --repeats 9
    ctrlrnn bench --markdown BENCHMARKS.md
    ctrlrnn bench --from bench-results/bench-20250101-120000.json --markdown BENCHMARKS.md
    ctrlrnn bench --list
    ctrlrnn bench --tiny --only lstm --repeats 1    # seconds: checks that it runs, times nothing

The tables and the progress bar fit the terminal (or $COLUMNS): on a narrow one the less
important columns are left out and named under the table; the JSON file keeps everything.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import sys
from pathlib import Path
from typing import Any

import torch

from ctrlrnn.bench import report, runner
from ctrlrnn.bench.cases import REGISTRY, select
from ctrlrnn.bench.fresh_processes import DEFAULT_PROCESSES
from ctrlrnn.bench.machine import busy_cpus_elsewhere
from ctrlrnn.bench.result_rows import BUSY_ELSEWHERE
from ctrlrnn.ops import gemm_path
from ctrlrnn.settings import raw, set_value

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float64": torch.float64}


def register(sub: Any) -> argparse.ArgumentParser:
    """Add the ``bench`` parser to the argparse sub-parsers object ``sub``."""
    p = sub.add_parser(
        "bench",
        help="time layers against torch.nn.LSTM/GRU and the roofline measured in the same run",
        description=(
            "Forward and forward+backward medians of ctrlrnn layers and ops, beside "
            "torch.nn.LSTM/GRU of the same width and the roofline floor (matmul FLOPs / GEMM "
            "rate + elementwise bytes / copy bandwidth, both measured in this run). Prints a "
            "table, writes JSON, optionally BENCHMARKS.md."
        ),
    )
    _add_grid_options(p)
    _add_output_options(p)
    _add_measuring_options(p)
    p.add_argument(
        "--compare",
        action="append",
        metavar="LABEL=JSON",
        help="with --markdown: set the rows of another results file (another GEMM path, "
        "another machine) beside this run's (repeatable)",
    )
    p.add_argument("--list", action="store_true", help="list the cases and their grids, then exit")
    p.add_argument("--overhead", action="store_true",
                   help="the per-call overhead rows instead (batch 1, T 1 and 8, against "
                   "nn.LSTM/LSTMCell/GRU, interleaved; with --tiny: one width, T 1)")
    p.set_defaults(func=main)
    return p


def _add_grid_options(p: argparse.ArgumentParser) -> None:
    """``--quick``, ``--full``, ``--tiny`` (which points to time) and ``--only`` (which
    cases)."""
    grid = p.add_mutually_exclusive_group()
    grid.add_argument(
        "--quick",
        dest="grid",
        action="store_const",
        const="quick",
        help="the quick grid (default; about 5 min on an idle 2-core machine, its fresh "
        "processes included)",
    )
    grid.add_argument(
        "--full",
        dest="grid",
        action="store_const",
        const="full",
        help="the full grid of batch x length x width (long: tens of minutes on 2 cores)",
    )
    grid.add_argument(
        "--tiny",
        dest="grid",
        action="store_const",
        const="tiny",
        help="tiny points only (batch 2, width 8, length 8; 8 to 32 for memory cases): a "
        "smoke test of the command in seconds; its timings mean nothing",
    )
    p.set_defaults(grid="quick")
    p.add_argument(
        "--only",
        action="append",
        metavar="PATTERN",
        help="run only cases whose name contains PATTERN or matches it as a glob (repeatable, "
        "or comma-separated); their comparison cases (e.g. lstm) run too",
    )


def _add_output_options(p: argparse.ArgumentParser) -> None:
    """Where the results go (``--out``, ``--markdown``), or ``--from`` which saved file."""
    p.add_argument(
        "--out",
        metavar="PATH",
        help="JSON results file (default bench-results/bench-<timestamp>.json)",
    )
    p.add_argument(
        "--markdown", metavar="PATH", help="(re)write this markdown file from the results"
    )
    p.add_argument(
        "--from",
        dest="source",
        metavar="JSON",
        help="do not measure: load this results file (then print it and/or write --markdown)",
    )


def _add_measuring_options(p: argparse.ArgumentParser) -> None:
    """How each point is timed: repeats, warm-up, time limit, fresh processes, threads, dtype
    and GEMM path."""
    p.add_argument("--repeats", type=int, default=5, help="timed repeats per measurement (5)")
    p.add_argument("--warmup", type=int, default=1, help="untimed calls before timing (1)")
    p.add_argument(
        "--max-seconds",
        type=float,
        default=10.0,
        help="stop adding repeats (after 3) once a measurement has taken this long (10)",
    )
    p.add_argument(
        "--processes",
        type=int,
        default=DEFAULT_PROCESSES,
        help="time the rows of the small-shape and batch-1 points, and the rows the targets "
        "read at their batch-32 points, again in this many fresh processes and take each "
        "ratio's median over them: there the times differ from one process to the next "
        f"({DEFAULT_PROCESSES}; 0: this process only)",
    )
    p.add_argument("--threads", type=int, help="torch.set_num_threads(N) (default: leave as is)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="float32", help="(float32)")
    p.add_argument(
        "--gemm",
        choices=sorted(gemm_path.PATHS),
        help="the GEMM path of ctrlrnn's compiled kernels for this run: auto (each shape class "
        "on the path measured fastest), blas, onednn, blas1 (BLAS on one thread) or tiny "
        "(ctrlrnn's kernel for per-step products of at most 8 rows, BLAS elsewhere) (default: "
        "CTRLRNN_GEMM, else auto)",
    )


def _compared(specs: list[str] | None) -> list[tuple[str, str, dict[str, Any]]]:
    """``--compare LABEL=JSON`` values as ``(label, path, document)``."""
    out = []
    for spec in specs or []:
        label, sep, path = spec.rpartition("=")  # labels may hold "=" (B=1)
        if not sep or not label or not path:
            raise ValueError(f"--compare: expected LABEL=JSON, got {spec!r}")
        out.append((label, path, report.load_json(path)))
    return out


def _patterns(only: list[str] | None) -> list[str]:
    return [s.strip() for item in only or [] for s in item.split(",") if s.strip()]


def _busy(elsewhere: float | None) -> str | None:
    """A warning when other work already occupies the CPUs (timings will be noisy), else None:
    judged by what other processes take of this process's CPUs now (``elsewhere``, half a
    second's measurement by :func:`busy_cpus_elsewhere`), or by the 1-minute load average where
    that could not be measured (None)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    if elsewhere is not None:
        if elsewhere > BUSY_ELSEWHERE:
            return (f"other processes keep {elsewhere:.1f} of {cpus} CPUs busy: every timing "
                    "will be slower and noisier (the JSON records it)")
        return None
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
    if load > 0.5 * cpus:
        return (
            f"1-minute load average {load:.1f} on {cpus} CPUs: other processes are running, "
            "every timing will be slower and noisier (the JSON records the load)"
        )
    return None


def _list_cases() -> int:
    # rich (and ctrlrnn.tables, built on it) come with the `train` extra: the parser must
    # register without it
    from rich.console import Console

    from ctrlrnn.tables import Col, fit_table

    cols = [
        Col("case"),
        Col("group", drop=2),
        Col("kind", drop=3),
        Col("compare to", wrap=True, drop=1),
        Col("quick points", justify="right", short="quick"),
        Col("full points", justify="right", short="full"),
        Col("description", wrap=True, min_width=30),
    ]
    rows = [
        [
            c.name,
            c.group,
            c.kind,
            ", ".join(c.compare_to) or "-",
            str(len(c.quick)),
            str(len(c.full)),
            c.description,
        ]
        for c in REGISTRY.values()
    ]
    console = Console()
    legend = None
    layout = fit_table(console.width, cols, rows)
    if layout.style == "compact":
        legend = "quick, full: the points of each grid"
    console.print(layout.table(rows, title="benchmark cases", caption=legend))
    return 0


def main(args: argparse.Namespace) -> int:
    """Run ``ctrlrnn bench`` with parsed ``args``; return the exit code."""
    # rich (and ctrlrnn.progress, built on it) come with the `train` extra
    from rich.console import Console

    console = Console()
    if not console.is_terminal and not raw("COLUMNS"):
        # a log file: wide enough for every column (set COLUMNS to choose another width)
        console = Console(width=max(console.width, 160))
    if args.list:
        return _list_cases()
    if args.overhead:
        from ctrlrnn.bench import overhead

        return overhead.run("tiny" if args.grid == "tiny" else "quick", console, args.markdown)
    try:
        compare = _compared(args.compare)
    except (ValueError, OSError) as exc:
        console.print(f"[red]{exc}[/]")
        return 2
    if args.source:
        doc = report.load_json(args.source)
        report.print_report(doc, console)
        if args.markdown:
            path = report.write_markdown(doc, args.markdown, source=args.source,
                                         compare=compare)
            console.print(f"markdown written to {path}")
        return 0
    wrong = _wrong_argument(args)
    if wrong:
        console.print(f"[red]{wrong}[/]")
        return 2
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    try:
        cases = select(_patterns(args.only))
    except ValueError as exc:
        console.print(f"[red]{exc}[/]")
        return 2
    out = args.out or (f"bench-results/bench-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}.json")
    console.print(
        f"ctrlrnn bench: {args.grid} grid, {len(cases)} case(s), {args.dtype}, "
        f"{torch.get_num_threads()} threads"
    )
    elsewhere = busy_cpus_elsewhere()  # measured once: the warning, and the JSON's record
    busy = _busy(elsewhere)
    if busy:
        console.print(f"[yellow]warning[/]: {busy}")
    doc = _measure(args, cases, console, elsewhere)
    return _report(doc, args, out, compare, console)


def _wrong_argument(args: argparse.Namespace) -> str | None:
    """The first numeric option out of its range, as one line; None when all are in range."""
    if args.repeats < 1:
        return "--repeats: expected at least 1"
    if args.processes < 0:
        return "--processes: expected 0 or more"
    if args.threads is not None and args.threads < 1:
        return "--threads: expected at least 1"
    return None


def _measure(args: argparse.Namespace, cases: Any, console: Any,
             elsewhere: float | None) -> dict[str, Any]:
    """Time ``cases`` as ``args`` ask, under a progress bar; the results document."""
    from ctrlrnn.progress import progress_bar

    if args.gemm:
        set_value("CTRLRNN_GEMM", args.gemm)  # for the kernels loaded from now on
    with gemm_path.use(args.gemm or gemm_path.requested()), \
            progress_bar(console=console) as bar:
        task = bar.add_task("starting", total=1)

        def progress(done: int, total: int, what: str) -> None:
            bar.update(task, completed=done, total=total, description=what)

        return runner.run(
            cases,
            grid=args.grid,
            dtype=DTYPES[args.dtype],
            warmup=args.warmup,
            repeats=args.repeats,
            max_seconds=args.max_seconds,
            progress=progress,
            threads=args.threads,
            argv=["ctrlrnn", *sys.argv[1:]],
            processes=args.processes,
            busy_elsewhere=elsewhere,
        )


def _report(doc: dict[str, Any], args: argparse.Namespace, out: str,
            compare: list[tuple[str, str, dict[str, Any]]], console: Any) -> int:
    """Save and print the results of a run, write ``--markdown``, list the failed points;
    the exit code (1 when a point failed)."""
    path = report.save_json(doc, out)
    report.print_report(doc, console)
    console.print(f"results written to {path} ({doc['elapsed_s']:.0f} s)")
    if args.markdown:
        md = report.write_markdown(doc, args.markdown, source=str(Path(out)), compare=compare)
        console.print(f"markdown written to {md}")
    errors = [r for r in doc["results"] if r["status"] == "error"]
    for r in errors:
        console.print(
            f"[red]error[/] {r['case']} B={r['batch']} T={r['length']} C={r['width']}: "
            f"{r['reason']}\n{r.get('traceback', '')}"
        )
    return 1 if errors else 0
