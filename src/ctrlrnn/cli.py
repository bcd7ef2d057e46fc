"""The ``ctrlrnn`` command: one entry point, its sub-commands registered by their modules.

Each module exposes ``register(subparsers)``, which adds its sub-commands' ``argparse``
parsers and sets ``func`` (called with the parsed namespace, returning an exit code).

A base install (no extras) lists every sub-command; those whose work needs a package of an
extra that is not installed say which extra in the list, and when run print one line with the
pip command that installs it (exit status 2) before doing anything.

Exit statuses: 0 done; 1 a fault of the machine (a full disk), data that could not be fetched
or a run that diverged; 2 a configuration or input that cannot be used (one line naming the key
or path); ``128 + N`` a stop by signal N (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP; see
:mod:`ctrlrnn.interrupts`).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import signal
import sys
import threading

from ctrlrnn.extras import EXTRA_FOR, missing_extra
from ctrlrnn.files import is_no_space, no_space_line
from ctrlrnn.interrupts import (
    STOP_SIGNALS,
    exit_status,
    interrupt_line,
    interrupted_words,
    reset_stop,
    run_cleanups,
    set_interrupt_line,
    stop_said,
    stopped_by,
)

__all__ = ["COMMANDS", "EXTRA_FOR", "NEEDS", "build_parser", "main", "missing_extra",
           "missing_for", "set_interrupt_line"]

#: exit status when a write found the device full (what was on disk before is kept)
EXIT_NO_SPACE = 1

#: sub-command name -> module that registers it (``ctrlrnn.train.cli`` registers two)
COMMANDS: dict[str, str] = {
    "info": "ctrlrnn.info",
    "build": "ctrlrnn.build",
    "bench": "ctrlrnn.bench.cli",
    "data": "ctrlrnn.data.cli",
    "train": "ctrlrnn.train.cli",
    "eval": "ctrlrnn.train.cli",
    "reproduce": "ctrlrnn.reproduce.cli",
}

#: sub-command -> the optional packages its work imports (each installed by the extra
#: :data:`~ctrlrnn.extras.EXTRA_FOR` names); ``data prepare`` of some sources needs more (the
#: ``data`` extra), said when it imports them
NEEDS: dict[str, tuple[str, ...]] = {
    "bench": ("rich",),
    "data": ("rich",),
    "train": ("rich", "safetensors", "matplotlib"),
    "eval": ("rich", "safetensors"),
    "reproduce": ("rich", "safetensors", "matplotlib", "optuna"),
}


def missing_for(command: str) -> tuple[str, str] | None:
    """``(package, extra)`` of the first package ``command`` needs that is not installed."""
    for package in NEEDS.get(command, ()):
        try:
            absent = importlib.util.find_spec(package) is None
        except (ImportError, ValueError):
            absent = True
        if absent:
            return package, EXTRA_FOR[package]
    return None


def _extra_note(extra: str) -> str:
    return f"[needs the '{extra}' extra: not installed]"


def _missing_extra_line(command: str, package: str, extra: str) -> str:
    return (f"ctrlrnn {command}: needs the optional package {package!r}, which is not installed: "
            f"pip install 'ctrlrnn[{extra}]' (from a clone: pip install -e '.[{extra}]')")


def _unavailable(sub: argparse._SubParsersAction, command: str, package: str,
                 extra: str) -> None:
    """Stand-in for a sub-command whose module needs a missing extra: it says which."""
    # no option prefix: every argument after the command is taken as it comes
    p = sub.add_parser(command, help=_extra_note(extra), add_help=False, prefix_chars="\0")
    p.add_argument("rest", nargs="*")
    line = _missing_extra_line(command, package, extra)
    p.set_defaults(func=lambda args: (print(line, file=sys.stderr), 2)[1])


def build_parser() -> argparse.ArgumentParser:
    missing = {command: m for command in COMMANDS if (m := missing_for(command)) is not None}
    extras = sorted({extra for _package, extra in missing.values()})
    parser = argparse.ArgumentParser(
        prog="ctrlrnn",
        description="Controlled recurrent networks: train, evaluate, benchmark, reproduce.",
        epilog=" ".join(f"The commands marked {_extra_note(e)} need: pip install "
                        f"'ctrlrnn[{e}]' (from a clone: pip install -e '.[{e}]')."
                        for e in extras) or None,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in dict.fromkeys(COMMANDS.values()):
        try:
            importlib.import_module(module).register(sub)
        except ImportError as exc:
            absent = missing_extra(exc)
            if absent is None:
                raise
            for command in (c for c, m in COMMANDS.items() if m == module):
                if command not in sub.choices:
                    _unavailable(sub, command, *absent)
    # the list ``ctrlrnn --help`` shows: argparse keeps one entry per sub-command here
    for entry in sub._choices_actions:
        if entry.dest in missing and "extra: not installed" not in (entry.help or ""):
            note = _extra_note(missing[entry.dest][1])
            entry.help = f"{entry.help} {note}" if entry.help else note
    return parser


def _install_interrupt_exit(command: str) -> None:
    """A stop signal (Ctrl-C, SIGTERM, SIGHUP) ends the command at once: the cleanups
    registered with :func:`ctrlrnn.interrupts.at_stop` run (a run directory's lock is
    released), one line is printed and the exit status is ``128 + signal number``.

    Raising ``KeyboardInterrupt`` at an arbitrary point (inside an import, a write, a
    library's ``except`` clause) can leave half-initialised modules and show their
    tracebacks; nothing the commands hold outside a training loop needs unwinding (files
    are written to a temporary name and renamed). The training loop installs its own
    handler (:class:`ctrlrnn.train.trainer.TrainingInterrupted`) and restores this one."""
    if threading.current_thread() is not threading.main_thread():
        return

    reset_stop()

    def on_stop(signum: int, frame: object) -> None:
        run_cleanups()
        line = "" if stop_said() else interrupt_line(command, signum)
        try:
            sys.stdout.flush()
        except Exception:  # noqa: BLE001
            pass
        if line:  # empty: another process of the launch says it
            os.write(2, (line + "\n").encode())
        os._exit(exit_status(signum))

    for signum in STOP_SIGNALS:
        signal.signal(signum, on_stop)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        # key=value overrides after options (``train ... --resume lr=0.01``): argparse only
        # takes positionals before the options that follow them
        if isinstance(getattr(args, "overrides", None), list) and all(
            "=" in item and not item.startswith("-") for item in extra
        ):
            args.overrides += extra
        else:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    absent = missing_for(args.command)
    if absent is not None:
        print(_missing_extra_line(args.command, *absent), file=sys.stderr)
        return 2
    args.argv = list(argv if argv is not None else sys.argv[1:])  # to say how to resume
    if argv is None:  # the command line itself, not a call from Python code
        _install_interrupt_exit(args.command)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt as exc:
        signum = stopped_by(exc)
        print(f"ctrlrnn {args.command}: {interrupted_words(signum)}", file=sys.stderr)
        return exit_status(signum)
    except ImportError as exc:
        missing = missing_extra(exc)
        if missing is None:
            raise
        print(_missing_extra_line(args.command, *missing), file=sys.stderr)
        return 2
    except Exception as exc:
        if not is_no_space(exc):
            raise
        print(no_space_line(exc), file=sys.stderr)
        return EXIT_NO_SPACE
    finally:
        if argv is None and stop_said():
            _ignore_stop_signals()


def _ignore_stop_signals() -> None:
    """Ignore further stop signals: the command has stopped and said so, and is exiting with
    its status (``torchrun`` signals the processes left once one has ended; Python's own
    handlers are gone while the interpreter shuts down, so such a signal would end the
    process by signal instead)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


if __name__ == "__main__":
    sys.exit(main())
