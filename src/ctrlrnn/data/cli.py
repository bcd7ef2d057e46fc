"""``ctrlrnn data list`` and ``ctrlrnn data prepare NAME``."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from ctrlrnn.data.cache import ENV_VAR, resolve_cache_dir
from ctrlrnn.data.catalog import entries, get_entry
from ctrlrnn.data.errors import DataError
from ctrlrnn.data.stats import render_stats


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``data`` command with its ``list`` and ``prepare`` sub-commands."""
    parser = sub.add_parser("data", help="list and prepare data sets and synthetic tasks")
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])
    actions = parser.add_subparsers(dest="data_command", metavar="ACTION")

    def add_cache_option(p: argparse.ArgumentParser) -> None:
        p.add_argument("--cache-dir", default=None,
                       help=f"cache directory (default: ${ENV_VAR} or ~/.cache/ctrlrnn/data)")

    p_list = actions.add_parser("list", help="every source and task, and whether it is ready")
    add_cache_option(p_list)
    p_list.set_defaults(func=cmd_list)

    p_prep = actions.add_parser("prepare", help="fetch, prepare and cache; print statistics")
    p_prep.add_argument("names", nargs="+", metavar="NAME", help="source or task name, or 'all'")
    p_prep.add_argument("--force", action="store_true", help="rebuild even if prepared")
    add_cache_option(p_prep)
    p_prep.set_defaults(func=cmd_prepare)


def cmd_list(args: argparse.Namespace) -> int:
    console = Console()
    cache_dir = resolve_cache_dir(args.cache_dir)
    table = Table(title=f"ctrlrnn data (cache: {cache_dir})")
    table.add_column("name", no_wrap=True)
    for column in ("kind", "what it is", "size", "origin", "ready"):
        table.add_column(column)
    for entry in entries().values():
        ready = entry.is_ready(cache_dir)
        table.add_row(entry.name, entry.kind, entry.summary, entry.size, entry.origin,
                      "[green]yes[/]" if ready else "[yellow]no[/]")
    console.print(table)
    return 0


def cmd_prepare(args: argparse.Namespace) -> int:
    console = Console()
    names = list(entries()) if args.names == ["all"] else args.names
    try:
        selected = [get_entry(name) for name in names]
    except ValueError as exc:
        console.print(f"[red]{exc}[/]")
        return 2
    status = 0
    for entry in selected:
        try:
            stats = entry.prepare(args.cache_dir, force=args.force)
        except DataError as exc:
            console.print(f"[red]{entry.name}: {exc}[/]")
            status = 1
            continue
        console.print(render_stats(stats))
        for key, value in stats.extra.items():
            console.print(f"  {key}: {value}")
    return status
