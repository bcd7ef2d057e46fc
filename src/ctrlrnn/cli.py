"""The ``ctrlrnn`` command: one entry point, one sub-command per module.

Each sub-command lives in its own module exposing ``register(subparsers)``, which adds an
``argparse`` parser and sets ``func`` (called with the parsed namespace, returning an exit code).
"""

from __future__ import annotations

import argparse
import importlib
import sys

#: sub-command name -> module that registers it
COMMANDS: dict[str, str] = {
    "info": "ctrlrnn.info",
    "build": "ctrlrnn.build",
    "bench": "ctrlrnn.bench.cli",
    "data": "ctrlrnn.data.cli",
    "train": "ctrlrnn.train.cli",
    "reproduce": "ctrlrnn.reproduce.cli",
}


#: optional package -> the extra of ctrlrnn that installs it (pyproject.toml). The layers need
#: none of them; the commands that train, plot, fetch data or score BLEU do.
EXTRA_FOR: dict[str, str] = {
    "rich": "train",
    "safetensors": "train",
    "matplotlib": "train",
    "music21": "data",
    "pysword": "data",
    "pyarrow": "data",
    "sacrebleu": "bleu",
    "triton": "gpu",
}


def missing_extra(exc: ImportError) -> tuple[str, str] | None:
    """``(package, extra)`` when ``exc`` is an optional package of an extra not installed."""
    name = (getattr(exc, "name", None) or "").split(".")[0]
    return (name, EXTRA_FOR[name]) if name in EXTRA_FOR else None


def _missing_extra_line(command: str, package: str, extra: str) -> str:
    return (f"ctrlrnn {command}: needs the optional package {package!r}, which is not installed: "
            f"pip install 'ctrlrnn[{extra}]' (from a clone: pip install -e '.[{extra}]')")


def _unavailable(sub: argparse._SubParsersAction, command: str, package: str,
                 extra: str) -> None:
    """Stand-in for a sub-command whose module needs a missing extra: it says which."""
    # no option prefix: every argument after the command is taken as it comes
    p = sub.add_parser(command, help=f"(needs the '{extra}' extra)", add_help=False,
                       prefix_chars="\0")
    p.add_argument("rest", nargs="*")
    line = _missing_extra_line(command, package, extra)
    p.set_defaults(func=lambda args: (print(line, file=sys.stderr), 2)[1])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ctrlrnn",
        description="Controlled recurrent networks: train, evaluate, benchmark, reproduce.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command, module in COMMANDS.items():
        try:
            importlib.import_module(module).register(sub)
        except ImportError as exc:
            missing = missing_extra(exc)
            if missing is None:
                raise
            _unavailable(sub, command, *missing)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except ImportError as exc:
        missing = missing_extra(exc)
        if missing is None:
            raise
        print(_missing_extra_line(args.command, *missing), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
