"""``ctrlrnn train`` and ``ctrlrnn eval``: the parsers over the run API of
:mod:`ctrlrnn.train.run` (which ``ctrlrnn reproduce`` calls directly).

    ctrlrnn train --task TASK --model MODEL [--config FILE.toml] [--max-steps N] [--epochs N]
                  [--out DIR] [--resume] [key=value ...]
    ctrlrnn eval --checkpoint RUN_DIR/best.safetensors [--split test]

The whole configuration (task, model, their options, every key=value) is checked before any
work starts; an unknown task, model or key, or a value of the wrong type, is refused with a
message naming it. Under ``torchrun`` the run is shared among the processes (see
:mod:`ctrlrnn.train.distributed`).
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import signal
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ctrlrnn import files
from ctrlrnn.data.errors import DataError
from ctrlrnn.extras import missing_extra
from ctrlrnn.interrupts import (
    exit_status,
    interrupted_words,
    say_stop,
    set_interrupt_line,
    stopped_by,
)
from ctrlrnn.metric_conventions import format_metrics
from ctrlrnn.models.encoders import COMMON, ENCODERS
from ctrlrnn.options import ConfigError
from ctrlrnn.tasks import TASKS, task_class
from ctrlrnn.tasks.base import Task
from ctrlrnn.train.config import (
    HELP,
    SameInEveryProcess,
    TrainConfig,
    model_help,
    parse_overrides,
)
from ctrlrnn.train.distributed import is_main_process
from ctrlrnn.train.run import rebuild_from_checkpoint, seed_everything, train_run, validated_config

if TYPE_CHECKING:
    from ctrlrnn.tasks.seq2seq_tasks import LengthScore

__all__ = ["build_run", "diverged_line", "rebuild_from_checkpoint", "register",
           "resume_command", "run_eval", "run_train", "seed_everything", "train_run",
           "validated_config"]


def _help_width() -> int:
    """The width ``ctrlrnn train --help`` wraps its text to: the terminal's, within 60-119."""
    return max(60, min(shutil.get_terminal_size((80, 24)).columns, 120) - 1)


def _epilog() -> str:
    """The tasks, models and configuration keys, wrapped to the terminal's width (the tasks
    and models only where the packages their modules import are installed)."""
    width = _help_width()

    def entry(name: str, text: str, pad: int) -> list[str]:
        lead = f"  {name:{pad}s} "
        return textwrap.wrap(text, width, initial_indent=lead,
                             subsequent_indent=" " * len(lead), break_on_hyphens=False)

    try:
        lines = _tasks_and_models(entry)
    except ImportError as exc:
        absent = missing_extra(exc)
        if absent is None:
            raise
        lines = [f"tasks and models: listed once the '{absent[1]}' extra is installed "
                 f"(pip install 'ctrlrnn[{absent[1]}]')"]
    lines.append("configuration keys (key=value):")
    for key, text in {**HELP, "model": model_help()}.items():
        lines += entry(key, text, 17)
    return "\n".join(lines)


def _tasks_and_models(entry: Callable[[str, str, int], list[str]]) -> list[str]:
    """The epilog's lists of tasks and models with their options."""
    lines = ["tasks:"]
    for name in sorted(TASKS):
        cls = task_class(name)
        opts = ", ".join(f"task.{k}={d!r}" for k, (_t, d) in cls.options.items())
        lines += entry(name, cls.description, 16)
        lines += entry("", f"options: {opts}", 16)
    lines.append("models (encoders):")
    for name, spec in ENCODERS.items():
        opts = ", ".join(f"model.{k}={d!r}" for k, (_t, d) in {**COMMON, **spec.options}.items())
        lines += entry(name, spec.description, 10)
        lines += entry("", f"options: {opts}", 10)
    return lines


def build_run(cfg_args: argparse.Namespace) -> tuple[TrainConfig, type[Task]]:
    """Validate the whole configuration of ``ctrlrnn train``; returns (config, task class).

    ``--override KEY=VALUE`` options count as ``key=value`` overrides (and, on ``--resume``,
    as accepted changes to the stored configuration)."""
    overrides: dict[str, Any] = parse_overrides(
        [*cfg_args.overrides, *(getattr(cfg_args, "override", None) or [])])
    for key in ("max_steps", "epochs", "out", "seed"):
        value = getattr(cfg_args, key, None)
        if value is not None:
            overrides[key] = value
    return validated_config(cfg_args.task, cfg_args.model, overrides, cfg_args.config)


#: exit status of a run stopped by a non-finite loss or parameter
EXIT_DIVERGED = 1
#: exit status of a configuration, option or input file that cannot be used
EXIT_USAGE = 2

#: what ``ctrlrnn train --help`` says of stops and exit statuses
EXITS_HELP = (
    "Ctrl-C, SIGTERM (container runtimes, Slurm preemption, systemd, timeout) and SIGHUP stop "
    "the run at the next step boundary: the checkpoint is written, the run directory's lock "
    "released, and one line names the command that resumes it; a second signal stops at once "
    "(the last checkpoint is kept). Under torchrun every process stops at the same step. Exit "
    "status: 0 done; 1 diverged, or a fault of the machine (a full disk); 2 a configuration "
    "or input that cannot be used (one line naming the key or path); 128 + the signal's "
    "number after a stop by signal (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP)."
)


def resume_command(argv: list[str], out: str) -> str:
    """The ``ctrlrnn train`` command line that continues the run of ``argv`` in ``out``."""
    args = [a for a in argv if a != "--resume"]
    if "--out" not in args and not any(a.startswith("--out=") for a in args):
        args += ["--out", out]
    return shlex.join(["ctrlrnn", *args, "--resume"])


def _without_key(argv: list[str], key: str) -> list[str]:
    """``argv`` less its settings of configuration ``key`` (``key=V``, ``--override key=V``)."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--override" and i + 1 < len(argv) and argv[i + 1].startswith(f"{key}="):
            i += 2
            continue
        if not arg.startswith((f"{key}=", f"--override={key}=")):
            out.append(arg)
        i += 1
    return out


def diverged_line(result: dict[str, Any], out: str, argv: list[str]) -> str:
    """The one line ``ctrlrnn train`` prints for a run stopped by a non-finite value."""
    # the trainer needs the `train` extra (rich, safetensors); the parser registers without it
    from ctrlrnn.train.trainer import LATEST

    stop = result["diverged"]
    head = f"ctrlrnn train: training diverged: {stop['what']}; nothing after it was saved"
    if stop.get("checkpoint_step") is None:
        return (f"{head} (no checkpoint had been written); lower lr (or set clip_norm) and "
                "train again")
    again = resume_command(_without_key(argv, "lr"), out)
    return (f"{head}: {Path(out) / LATEST} holds step {stop['checkpoint_step']}, the last finite "
            f"state; to continue it at a lower learning rate: {again} --override lr=LOWER")


#: how long a process other than the main one waits before it exits on a refusal that the
#: main process says for all: torchrun stops every process once one has failed, so a process
#: that exits first could stop the main one before its line is out
REFUSAL_GRACE_S = 30.0


def _refuse(line: str, *, alike: bool) -> int:
    """Print the refusal ``line`` on stderr and return the usage exit status. Under
    ``torchrun`` a refusal every process meets ``alike`` is said by the main process alone,
    and the others wait until torchrun stops them (the stop handler exits at once, saying
    nothing from a process other than the main one), or :data:`REFUSAL_GRACE_S` has passed."""
    if not alike or is_main_process():
        print(line, file=sys.stderr)
    else:
        time.sleep(REFUSAL_GRACE_S)
    return EXIT_USAGE


def run_train(args: argparse.Namespace) -> int:
    # the trainer needs the `train` extra (rich, safetensors); the parser registers without it
    from ctrlrnn.train.trainer import LATEST, TrainingInterrupted

    try:
        cfg, cls = build_run(args)
    except (ConfigError, ValueError) as exc:
        return _refuse(f"ctrlrnn train: {exc}", alike=True)
    argv = list(getattr(args, "argv", None) or sys.argv[1:])

    def interrupted(signum: int = signal.SIGINT) -> str:
        if not is_main_process():
            return ""
        from ctrlrnn.train.checkpoint import stored_step

        latest = Path(cfg.out) / LATEST if cfg.out else None
        words = interrupted_words(signum)
        if latest is not None and latest.exists():
            step = stored_step(latest)
            holds = f" (step {step})" if step is not None else ""
            return (f"ctrlrnn train: {words}; the last checkpoint is {latest}{holds}; "
                    f"resume with: {resume_command(argv, str(cfg.out))}")
        return f"ctrlrnn train: {words} before the first checkpoint; nothing to resume"

    set_interrupt_line(interrupted)
    accept = frozenset(parse_overrides(args.override or []))
    try:
        result = train_run(cfg, cls, resume=args.resume, show_progress=not args.no_progress,
                           accept=accept)
    except ConfigError as exc:
        return _refuse(f"ctrlrnn train: {exc}", alike=isinstance(exc, SameInEveryProcess))
    except TrainingInterrupted as stop:
        say_stop(f"ctrlrnn train: {interrupted_words(stop.signum)} at step {stop.step}; "
                 f"checkpoint {stop.checkpoint}; resume with: "
                 f"{resume_command(argv, str(cfg.out))}" if is_main_process() else "")
        return exit_status(stop.signum)
    except KeyboardInterrupt as exc:
        signum = stopped_by(exc)
        say_stop(interrupted(signum))
        return exit_status(signum)
    if result is not None and result.get("stop_reason") == "diverged":
        print(diverged_line(result, str(cfg.out), argv), file=sys.stderr)
        return EXIT_DIVERGED
    return 0


def run_eval(args: argparse.Namespace) -> int:
    from ctrlrnn.train.distributed import resolve_device

    try:
        device = resolve_device(args.device)
        _cfg, task, model, ckpt = rebuild_from_checkpoint(args.checkpoint)
        # the weights must fit the model the stored configuration builds on today's data
        ckpt.restore(model, rng=False)
    except (FileNotFoundError, ValueError, DataError) as exc:
        print(f"ctrlrnn eval: {exc}", file=sys.stderr)
        return EXIT_USAGE
    by_length = getattr(task, "exact_match_by_length", None)
    if args.by_length and by_length is None:
        print(f"ctrlrnn eval: --by-length: task {task.name!r} decodes no sequences; only the "
              "sequence-to-sequence tasks have an exact match by target length",
              file=sys.stderr)
        return EXIT_USAGE
    model.to(device)
    task.device = device
    model.eval()
    if args.by_length:
        outputs: dict[int, list[int]] = {}
        with torch.no_grad():
            metrics = task.evaluate(model, args.split, 0, outputs=outputs)
        return _print_by_length(args, metrics, by_length(model, args.split, outputs))
    with torch.no_grad():
        metrics = task.evaluate(model, args.split, 0)
    if args.json:
        print(files.dumps({"checkpoint": str(args.checkpoint), "split": args.split, **metrics},
                          indent=1))
    else:
        print(f"{args.split}  {format_metrics(metrics)}  ({args.checkpoint})")
    return 0


def _print_by_length(args: argparse.Namespace, metrics: dict[str, float],
                     counts: dict[int, LengthScore]) -> int:
    """The split's metrics, then at each target length its examples, the share exactly right
    and the share wrong only in order (the target's tokens in another order): a table, or
    with ``--json`` a ``by_length`` list of ``{length, examples, exact_match, reordered}``
    rows, shares as fractions."""
    rows = [{"length": length, "examples": c.examples, "exact_match": c.exact / c.examples,
             "reordered": c.reordered / c.examples} for length, c in counts.items()]
    if args.json:
        print(files.dumps({"checkpoint": str(args.checkpoint), "split": args.split, **metrics,
                           "by_length": rows}, indent=1))
        return 0
    print(f"{args.split}  {format_metrics(metrics)}  ({args.checkpoint})")
    print("target length  examples  exact match (%)  wrong only in order (%)")
    for row in rows:
        print(f"{row['length']:>13}  {row['examples']:>8}  {100 * row['exact_match']:>15.1f}"
              f"  {100 * row['reordered']:>23.1f}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train and evaluate a model on a task",
        description="Train any ctrlrnn encoder (or nn.LSTM/GRU) on one of the papers' tasks.\n\n"
                    + textwrap.fill(EXITS_HELP, _help_width()),
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--task", required=True, help="task name (listed below)")
    p.add_argument("--model", required=True, help="encoder name (listed below)")
    p.add_argument("--config", help="TOML file with configuration keys ([model], [task] tables)")
    p.add_argument("--max-steps", dest="max_steps", type=int, help="stop after N steps")
    p.add_argument("--epochs", type=int, help="number of epochs")
    p.add_argument("--seed", type=int, help="random seed")
    p.add_argument("--out", help="output directory")
    p.add_argument("--resume", action="store_true", help="continue the run in --out")
    p.add_argument("--override", action="append", metavar="KEY=VALUE",
                   help="with --resume: continue the run with KEY changed to VALUE (the "
                        "stored configuration must otherwise match; repeatable)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="configuration overrides")
    p.set_defaults(func=run_train)

    e = sub.add_parser("eval", help="evaluate a checkpoint on a split")
    e.add_argument("--checkpoint", required=True, help="a .safetensors checkpoint of a run")
    e.add_argument("--split", default="test", choices=["valid", "test"])
    e.add_argument("--json", action="store_true",
                   help="print the metrics as JSON (accuracies as fractions in [0, 1])")
    e.add_argument("--by-length", dest="by_length", action="store_true",
                   help="sequence-to-sequence tasks: also, at each target length, the "
                        "share exactly right and the share wrong only in order")
    e.add_argument("--device", default="auto",
                   help="auto (the default: $CTRLRNN_DEVICE, else the GPU when there is one), "
                        "cpu, cuda or cuda:N")
    e.set_defaults(func=run_eval)

