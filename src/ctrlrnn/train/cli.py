"""``ctrlrnn train`` and ``ctrlrnn eval``.

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
import random
import re
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ctrlrnn import files
from ctrlrnn.tasks.base import Task
from ctrlrnn.train.config import (
    HELP,
    ConfigError,
    TrainConfig,
    check_options,
    load_config,
    parse_overrides,
)
from ctrlrnn.units import format_metrics


def _epilog() -> str:
    """The tasks, models and configuration keys, wrapped to the terminal's width (the tasks
    and models only where the packages their modules import are installed)."""
    import shutil
    import textwrap

    width = max(60, min(shutil.get_terminal_size((80, 24)).columns, 120) - 1)

    def entry(name: str, text: str, pad: int) -> list[str]:
        lead = f"  {name:{pad}s} "
        return textwrap.wrap(text, width, initial_indent=lead,
                             subsequent_indent=" " * len(lead), break_on_hyphens=False)

    try:
        lines = _tasks_and_models(entry)
    except ImportError as exc:
        from ctrlrnn.cli import missing_extra

        absent = missing_extra(exc)
        if absent is None:
            raise
        lines = [f"tasks and models: listed once the '{absent[1]}' extra is installed "
                 f"(pip install 'ctrlrnn[{absent[1]}]')"]
    lines.append("configuration keys (key=value):")
    for key, text in HELP.items():
        lines += entry(key, text, 17)
    return "\n".join(lines)


def _tasks_and_models(entry: Callable[[str, str, int], list[str]]) -> list[str]:
    """The epilog's lists of tasks and models with their options."""
    from ctrlrnn.models.encoders import COMMON, ENCODERS
    from ctrlrnn.tasks import TASKS, task_class

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


def validated_config(
    task: str, model: str, overrides: dict[str, Any], config_path: str | None = None
) -> tuple[TrainConfig, type[Task]]:
    """The whole configuration of a run, checked (task, model, every key and option) before
    any work; returns (config, task class). Used by ``ctrlrnn train`` and ``reproduce``."""
    from ctrlrnn.models.encoders import encoder_options
    from ctrlrnn.tasks import task_class

    cls = task_class(task)
    cfg = load_config(config_path, {**overrides, "task": task, "model": model},
                      base=dict(cls.defaults))
    cfg.task_args = check_options("task", cfg.task, cfg.task_args, cls.options)
    cfg.model_args = encoder_options(cfg.model, {**cls.model_defaults, **cfg.model_args})
    return cfg, cls


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


def rebuild_from_checkpoint(path: str | Path) -> tuple[TrainConfig, Task, Any, Any]:
    """(config, set-up task, model, checkpoint) of the run that wrote checkpoint ``path``,
    the model initialised with the run's seed (its weights not yet restored)."""
    from ctrlrnn.models.encoders import encoder_options
    from ctrlrnn.tasks import task_class
    from ctrlrnn.train.checkpoint import Checkpoint

    ckpt = Checkpoint(path)
    cfg = TrainConfig(**ckpt.config)
    cls = task_class(cfg.task)
    seed_everything(cfg.seed)
    task = cls(check_options("task", cfg.task, cfg.task_args, cls.options), cfg.seed)
    task.setup()
    seed_everything(cfg.seed)
    model = task.build_model(cfg.model, encoder_options(cfg.model, cfg.model_args))
    return cfg, task, model, ckpt


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def train_run(
    cfg: TrainConfig,
    task_cls: type[Task],
    *,
    resume: bool = False,
    show_progress: bool = True,
    verbose: bool = True,
    accept: frozenset[str] = frozenset(),
) -> dict[str, Any] | None:
    """Train ``cfg`` (already validated) to the end; returns the result on the main process.

    Used by ``ctrlrnn train`` and ``ctrlrnn reproduce``. The main process holds the run
    directory's lock (:class:`~ctrlrnn.train.run_lock.RunLock`) from before the task is set up
    until the report is written. Raises :class:`ConfigError` when the output directory holds
    a run and ``resume`` is false, when another process holds it, when it cannot be written,
    and when resuming with a configuration that differs from the stored one in keys other
    than those meant to change and ``accept`` (flattened names: ``lr``, ``model.hidden_size``).
    """
    from ctrlrnn.data.errors import DataError
    from ctrlrnn.train.distributed import init_distributed, shutdown
    from ctrlrnn.train.report import write_report
    from ctrlrnn.train.run_lock import RunLock, RunLocked
    from ctrlrnn.train.trainer import Trainer

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    try:
        ctx = init_distributed(cfg.device)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    if not cfg.out:
        cfg.out = f"runs/{cfg.task}-{cfg.model}-seed{cfg.seed}"
    out = Path(cfg.out)
    lock = RunLock(out) if ctx.is_main else None
    try:
        if lock is not None:
            try:
                lock.acquire()
            except RunLocked as exc:
                raise ConfigError(str(exc)) from exc
            except OSError as exc:
                if files.is_no_space(exc):
                    raise files.NoSpaceLeft(lock.path) from exc
                raise ConfigError(f"out: cannot write to {out}: "
                                  f"{exc.strerror or exc}") from exc
        seed_everything(cfg.seed)
        task = task_cls(cfg.task_args, cfg.seed)
        try:
            task.setup()
            model = task.build_model(cfg.model, cfg.model_args).to(ctx.device)
        except (ValueError, FileNotFoundError, DataError) as exc:
            # missing data or an optional package, a bad task.path, an option the model
            # refuses: say it, no traceback
            raise ConfigError(str(exc)) from exc
        except (RuntimeError, MemoryError) as exc:
            asked = _allocation_failure(exc)
            if asked is None:
                raise
            raise ConfigError(f"model: {cfg.model} with these options needs more memory than "
                              f"{ctx.device} has ({asked}); choose smaller model.* or task.* "
                              "options") from exc
        trainer = Trainer(cfg, task, model, out, ctx, show_progress=show_progress,
                          accept=accept)
        result = trainer.fit(resume=resume)
        if not ctx.is_main:
            return None
        n_params = sum(p.numel() for p in model.parameters())
        result["parameters"] = n_params
        report = write_report(
            out,
            config=cfg.to_dict(),
            result=result,
            data=task.data_summary(),
            model_info={"encoder": cfg.model, "parameters": n_params,
                        "processes": ctx.world_size},
            rows=trainer.log.rows() if trainer.log else [],
        )
        if verbose and result.get("stop_reason") != "diverged":
            print(f"step {result['step']} (best validation {result['metric']} at step "
                  f"{result['best_step']}; {result['train_seconds']:.1f} s of training)")
            print(f"valid  {format_metrics(result['valid'])}")
            print(f"test   {format_metrics(result['test'])}")
            print(f"report: {report} (numbers for programs: {out / 'result.json'})")
        return result
    finally:
        if lock is not None:
            lock.release()
        shutdown(ctx)


def _allocation_failure(exc: BaseException) -> str | None:
    """What an allocation that failed asked for (``153600000000000 bytes``, or ``out of
    memory``), or None when ``exc`` is not an allocation failure."""
    if isinstance(exc, MemoryError) or isinstance(exc, getattr(torch, "OutOfMemoryError", ())):
        return "out of memory"
    text = str(exc)
    if "can't allocate memory" not in text:
        return None
    asked = re.search(r"allocate ([0-9]+) bytes", text)
    return f"{int(asked.group(1)):,} bytes asked for" if asked else "out of memory"


#: exit status after Ctrl-C, as shells report a process ended by SIGINT
EXIT_INTERRUPTED = 130
#: exit status of a run stopped by a non-finite loss or parameter
EXIT_DIVERGED = 1


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
    from ctrlrnn.train.trainer import LATEST

    stop = result["diverged"]
    head = f"ctrlrnn train: training diverged: {stop['what']}; nothing after it was saved"
    if stop.get("checkpoint_step") is None:
        return (f"{head} (no checkpoint had been written); lower lr (or set clip_norm) and "
                "train again")
    again = resume_command(_without_key(argv, "lr"), out)
    return (f"{head}: {Path(out) / LATEST} holds step {stop['checkpoint_step']}, the last finite "
            f"state; to continue it at a lower learning rate: {again} --override lr=LOWER")


def run_train(args: argparse.Namespace) -> int:
    from ctrlrnn.train.trainer import LATEST, TrainingInterrupted

    try:
        cfg, cls = build_run(args)
    except (ConfigError, ValueError) as exc:
        print(f"ctrlrnn train: {exc}", file=sys.stderr)
        return 2
    from ctrlrnn.cli import set_interrupt_line

    argv = list(getattr(args, "argv", None) or sys.argv[1:])

    def interrupted() -> str:
        latest = Path(cfg.out) / LATEST if cfg.out else None
        if latest is not None and latest.exists():
            return (f"ctrlrnn train: interrupted; the last checkpoint is {latest}; resume "
                    f"with: {resume_command(argv, str(cfg.out))}")
        return "ctrlrnn train: interrupted before the first checkpoint; nothing to resume"

    set_interrupt_line(interrupted)
    accept = frozenset(parse_overrides(args.override or []))
    try:
        result = train_run(cfg, cls, resume=args.resume, show_progress=not args.no_progress,
                           accept=accept)
    except ConfigError as exc:
        print(f"ctrlrnn train: {exc}", file=sys.stderr)
        return 2
    except TrainingInterrupted as stop:
        print(f"ctrlrnn train: interrupted at step {stop.step}; checkpoint {stop.checkpoint}; "
              f"resume with: {resume_command(argv, str(cfg.out))}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        print(interrupted(), file=sys.stderr)
        return EXIT_INTERRUPTED
    if result is not None and result.get("stop_reason") == "diverged":
        print(diverged_line(result, str(cfg.out), argv), file=sys.stderr)
        return EXIT_DIVERGED
    return 0


def run_eval(args: argparse.Namespace) -> int:
    try:
        _cfg, task, model, ckpt = rebuild_from_checkpoint(args.checkpoint)
    except (FileNotFoundError, ValueError) as exc:
        print(f"ctrlrnn eval: {exc}", file=sys.stderr)
        return 2
    ckpt.restore(model, rng=False)
    model.eval()
    with torch.no_grad():
        metrics = task.evaluate(model, args.split, 0)
    if args.json:
        print(files.dumps({"checkpoint": str(args.checkpoint), "split": args.split, **metrics},
                          indent=1))
    else:
        print(f"{args.split}  {format_metrics(metrics)}  ({args.checkpoint})")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train and evaluate a model on a task",
        description="Train any ctrlrnn encoder (or nn.LSTM/GRU) on one of the papers' tasks.",
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
    e.set_defaults(func=run_eval)

