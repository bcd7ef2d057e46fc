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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ctrlrnn",
        description="Controlled recurrent networks: train, evaluate, benchmark, reproduce.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMANDS.values():
        importlib.import_module(module).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
