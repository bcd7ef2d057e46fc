"""``ctrlrnn data list``, ``ctrlrnn data prepare NAME`` and ``ctrlrnn data add NAME PATH``.

The console packages (the ``train`` extra's rich) are imported by the commands, not here, so
that a base install lists ``data`` among the commands."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from ctrlrnn.data.cache import ENV_VAR, resolve_cache_dir
from ctrlrnn.data.catalog import entries, get_entry
from ctrlrnn.data.errors import CacheNotWritable, DataError
from ctrlrnn.data.stats import render_stats

if TYPE_CHECKING:
    from rich.console import Console

    from ctrlrnn.tables import Col


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

    p_add = actions.add_parser(
        "add", help="register your copy of a data set that cannot be had here (for "
        "`ctrlrnn reproduce --scale paper`)")
    p_add.add_argument("name", metavar="NAME", help="the data set's name (see `ctrlrnn data "
                       "list`, table 'your files')")
    p_add.add_argument("path", metavar="PATH", help="the file or folder holding it")
    add_cache_option(p_add)
    p_add.set_defaults(func=cmd_add)

    p_remove = actions.add_parser("remove", help="forget a data set registered with `add`")
    p_remove.add_argument("name", metavar="NAME")
    add_cache_option(p_remove)
    p_remove.set_defaults(func=cmd_remove)


def user_needs() -> dict[str, str]:
    """The data sets a user can register: name -> the files it needs, in words."""
    from ctrlrnn.data.user_needs import USER_DATA_SETS

    return {name: f"{need.files} ({need.origin})" for name, need in USER_DATA_SETS.items()}


def cmd_add(args: argparse.Namespace) -> int:
    """``ctrlrnn data add NAME PATH``: record the path; 2 on an unknown name or missing path."""
    from ctrlrnn.data import user_files

    try:
        target = user_files.add(args.name, args.path, user_needs(), args.cache_dir)
    except DataError as exc:
        print(f"ctrlrnn data add: {exc}", file=sys.stderr)
        return 2
    print(f"{args.name}: {target} (`ctrlrnn reproduce --scale paper` reads it from now on)")
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    """``ctrlrnn data remove NAME``: 1 when it was not registered."""
    from ctrlrnn.data import user_files

    try:
        found = user_files.remove(args.name, args.cache_dir)
    except DataError as exc:
        print(f"ctrlrnn data remove: {exc}", file=sys.stderr)
        return 2
    if not found:
        print(f"ctrlrnn data remove: {args.name} is not registered", file=sys.stderr)
        return 1
    print(f"{args.name}: forgotten")
    return 0


def list_columns() -> list[Col]:
    """The columns of ``ctrlrnn data list``; on a narrow console those of highest ``drop`` go
    first (without ``kind`` the real data sets and the synthetic tasks get a table each)."""
    # rich (ctrlrnn.tables is built on it) is the `train` extra: the parser registers without it
    from ctrlrnn.tables import Col

    return [
        Col("name"),
        Col("kind", drop=2),
        Col("what it is", wrap=True, min_width=40),
        Col("size", wrap=", "),
        Col("origin", wrap=True, drop=3),
        Col("ready"),
    ]


KIND_TITLES = {"real": "data sets", "synthetic": "synthetic tasks"}


def cmd_list(args: argparse.Namespace) -> int:
    # rich (the `train` extra): the parser registers without it
    from rich.console import Console

    from ctrlrnn.tables import fit_table

    console = Console()
    cache_dir = resolve_cache_dir(args.cache_dir)
    rows = []
    for entry in entries().values():
        ready = entry.is_ready(cache_dir)
        rows.append([entry.name, entry.kind, entry.summary, entry.size, entry.origin,
                     "[green]yes[/]" if ready else "[yellow]no[/]"])
    layout = fit_table(console.width, list_columns(), rows)
    if "kind" not in layout.dropped:
        console.print(layout.table(rows, title=f"ctrlrnn data (cache: {cache_dir})"))
        return _print_user_files(console, args.cache_dir)
    console.print(f"[bold]ctrlrnn data[/] (cache: {cache_dir})")
    kinds = list(dict.fromkeys(row[1] for row in rows))
    for n, kind in enumerate(kinds):
        console.print(layout.table([row for row in rows if row[1] == kind],
                                   title=KIND_TITLES.get(kind, kind),
                                   note_dropped=n == len(kinds) - 1))
    return _print_user_files(console, args.cache_dir)


def _print_user_files(console: Console, cache_dir: str | None) -> int:
    """The data sets only the user can supply (``ctrlrnn reproduce --scale paper``): a table of
    those registered, and one line naming the rest."""
    from ctrlrnn.data import user_files
    from ctrlrnn.tables import Col, fit_table

    try:
        paths = user_files.registered(cache_dir)
    except DataError as exc:
        print(f"ctrlrnn data list: {exc}", file=sys.stderr)
        return 1
    names = list(user_needs())
    given = [[name, paths[name]] for name in names if name in paths]
    if given:
        layout = fit_table(console.width, [Col("name"), Col("your copy", wrap=True)], given)
        console.print(layout.table(given, title="your files"))
    rest = [name for name in names if name not in paths]
    if rest:
        console.print(f"Only you can supply (for `--scale paper`): {', '.join(rest)}. "
                      "Register each with `ctrlrnn data add NAME PATH`.", highlight=False)
    return 0


def cmd_prepare(args: argparse.Namespace) -> int:
    from rich.console import Console

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
            # one plain line (rich would fold it at the terminal's width)
            print(f"ctrlrnn data prepare: {entry.name}: {exc}", file=sys.stderr)
            # a cache that cannot be written is the setting's to change (2); the rest, 1
            status = max(status, 2 if isinstance(exc, CacheNotWritable) else 1)
            continue
        console.print(render_stats(stats, console.width))
        for key, value in stats.extra.items():
            console.print(f"  {key}: {value}")
    return status
