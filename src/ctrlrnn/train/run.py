"""A training run as an API: validate its configuration, train it, rebuild it from a checkpoint.

``ctrlrnn train`` / ``ctrlrnn eval`` (:mod:`ctrlrnn.train.cli`) and ``ctrlrnn reproduce``
(:mod:`ctrlrnn.reproduce`) call these:

* :func:`validated_config`: the whole configuration of a run, checked before any work;
* :func:`train_run`: train a validated configuration to the end, holding the run directory's
  lock, and write its report;
* :func:`rebuild_from_checkpoint`: the configuration, task and model of the run that wrote a
  checkpoint;
* :func:`seed_everything`: seed Python's, NumPy's and torch's generators.
"""

from __future__ import annotations

import os
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ctrlrnn import files
from ctrlrnn.data.errors import DataError
from ctrlrnn.metric_conventions import format_metrics
from ctrlrnn.models.encoders import COMMON, ENCODERS, encoder_options
from ctrlrnn.options import ConfigError, check_options
from ctrlrnn.tasks import task_class
from ctrlrnn.tasks.base import MemoryNeed, Task
from ctrlrnn.train.config import SameInEveryProcess, TrainConfig, load_config
from ctrlrnn.train.distributed import (
    check_batch_split,
    init_distributed,
    launched_world_size,
    shutdown,
)
from ctrlrnn.train.report import write_report
from ctrlrnn.train.run_lock import RunLock, RunLocked


def validated_config(
    task: str, model: str, overrides: dict[str, Any], config_path: str | None = None
) -> tuple[TrainConfig, type[Task]]:
    """The whole configuration of a run, checked (task, model, every key and option) before
    any work; returns (config, task class). Used by ``ctrlrnn train`` and ``reproduce``."""
    cls = task_class(task)
    cfg = load_config(config_path, {**overrides, "task": task, "model": model},
                      base=dict(cls.defaults))
    cfg.task_args = check_options("task", cfg.task, cfg.task_args, cls.options)
    cfg.model_args = encoder_options(cfg.model, {**cls.model_defaults, **cfg.model_args})
    return cfg, cls


def rebuild_from_checkpoint(path: str | Path) -> tuple[TrainConfig, Task, Any, Any]:
    """(config, set-up task, model, checkpoint) of the run that wrote checkpoint ``path``,
    the model initialised with the run's seed (its weights not yet restored)."""
    # checkpoints are safetensors files (the `train` extra): the `ctrlrnn` command imports this
    # module, through its parser, without it
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
    """Seed Python's, NumPy's and torch's random generators with ``seed``."""
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

    Refused before anything is set up (:class:`SameInEveryProcess`, which under ``torchrun``
    the main process says for all): a ``batch_size`` that the launched processes cannot share
    equally, and task options whose data or training batch the task estimates to need more
    memory than the machine (the device) has. Refused once the task is set up: a training
    set smaller than one batch. Running out of memory while training is a
    :class:`ConfigError` naming the sizes set above their defaults.
    """
    # the trainer's progress bar and checkpoints need the `train` extra (rich, safetensors): the
    # `ctrlrnn` command imports this module, through its parser, without it
    from ctrlrnn.train.trainer import Trainer

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    world = launched_world_size()
    try:
        check_batch_split(cfg.batch_size, world)
    except ValueError as exc:
        raise SameInEveryProcess(str(exc)) from exc
    try:
        ctx = init_distributed(cfg.device)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    if not cfg.out:
        cfg.out = f"runs/{cfg.task}-{cfg.model}-seed{cfg.seed}"
    out = Path(cfg.out)
    seed_everything(cfg.seed)
    task = task_cls(cfg.task_args, cfg.seed)
    _check_memory(task, cfg.batch_size // world, ctx.device)
    lock = RunLock(out) if ctx.is_main else None
    try:
        if lock is not None:
            _acquire(lock, out)
        model = _set_up(task, cfg, ctx.device)
        trainer = Trainer(cfg, task, model, out, ctx, show_progress=show_progress,
                          accept=accept)
        try:
            result = trainer.fit(resume=resume)
        except (RuntimeError, MemoryError) as exc:
            asked = _allocation_failure(exc)
            if asked is None:
                raise
            raise ConfigError(_out_of_memory_line(cfg, task_cls, ctx.device, asked,
                                                  trainer.checkpoint_step, out)) from exc
        if not ctx.is_main:
            return None
        _report(result, cfg, task, model, out, trainer.log.rows() if trainer.log else [],
                processes=ctx.world_size, verbose=verbose)
        return result
    finally:
        if lock is not None:
            lock.release()
        shutdown(ctx)


def _acquire(lock: RunLock, out: Path) -> None:
    """Take the run directory's lock, or say why not (:class:`ConfigError`; a full disk is
    :class:`~ctrlrnn.files.NoSpaceLeft`)."""
    try:
        lock.acquire()
    except RunLocked as exc:
        raise ConfigError(str(exc)) from exc
    except OSError as exc:
        if files.is_no_space(exc):
            raise files.NoSpaceLeft(lock.path) from exc
        raise ConfigError(f"out: cannot write to {out}: "
                          f"{exc.strerror or exc}") from exc


def _set_up(task: Task, cfg: TrainConfig, device: torch.device) -> nn.Module:
    """Set ``task`` up and build its model on ``device``; missing data, a bad option or a
    model too large for the device is a :class:`ConfigError`."""
    try:
        task.setup()
        model = task.build_model(cfg.model, cfg.model_args).to(device)
        task.device = device
    except (ValueError, FileNotFoundError, DataError) as exc:
        # missing data or an optional package, a bad task.path, an option the model
        # refuses: say it, no traceback
        raise ConfigError(str(exc)) from exc
    except (RuntimeError, MemoryError) as exc:
        asked = _allocation_failure(exc)
        if asked is None:
            raise
        raise ConfigError(f"model: {cfg.model} with these options needs more memory than "
                          f"{device} has ({asked}); choose smaller model.* or task.* "
                          "options") from exc
    return model


def _report(result: dict[str, Any], cfg: TrainConfig, task: Task, model: nn.Module, out: Path,
            rows: list[dict[str, Any]], *, processes: int, verbose: bool) -> None:
    """Add the parameter count to ``result``, write the run's report and, when ``verbose``,
    print its lines (a diverged run's the caller says)."""
    n_params = sum(p.numel() for p in model.parameters())
    result["parameters"] = n_params
    report = write_report(
        out,
        config=cfg.to_dict(),
        result=result,
        data=task.data_summary(),
        model_info={"encoder": cfg.model, "parameters": n_params,
                    "processes": processes},
        rows=rows,
    )
    if verbose and result.get("stop_reason") != "diverged":
        print(f"step {result['step']} (best validation {result['metric']} at step "
              f"{result['best_step']}; {result['train_seconds']:.1f} s of training)")
        print(f"valid  {format_metrics(result['valid'])}")
        print(f"test   {format_metrics(result['test'])}")
        print(f"report: {report} (numbers for programs: {out / 'result.json'})")


def _size(n: int) -> str:
    """A byte count as a message shows it: ``2.6 TB``, ``512 MB``."""
    units = ("bytes", "kB", "MB", "GB", "TB", "PB")
    value, unit = float(n), 0
    while value >= 1000 and unit < len(units) - 1:
        value, unit = value / 1000, unit + 1
    return f"{value:,.0f} bytes" if unit == 0 else f"{value:,.1f} {units[unit]}"


def host_memory() -> int | None:
    """Bytes of memory this process may use: the machine's, or its container's (cgroup)
    limit when lower; None where neither can be read."""
    sizes: list[int] = []
    try:
        sizes.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        pass
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(limit).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < 2**60:
            sizes.append(int(text))
    return min(sizes) if sizes else None


def device_memory(device: torch.device) -> int | None:
    """Bytes of memory of ``device``: a GPU's own, the host's for the CPU."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return int(torch.cuda.get_device_properties(index).total_memory)
    return host_memory()


def _check_memory(task: Task, batch_size: int, device: torch.device) -> None:
    """Refuse, before the task generates or loads anything, options whose data or training
    batch needs more memory than the machine has (the task's own estimate, naming its
    option)."""
    for need in task.memory_needs(max(batch_size, 1)):
        have = device_memory(device) if need.on_device else host_memory()
        if have is None or need.bytes <= have:
            continue
        raise SameInEveryProcess(_memory_line(task, need, have, device))


def _memory_line(task: Task, need: MemoryNeed, have: int, device: torch.device) -> str:
    where = f"{device} memory" if need.on_device else "this machine's memory"
    others = f" (or {', '.join(need.also)})" if need.also else ""
    return (f"task.{need.option}: {task.opts[need.option]} needs about {_size(need.bytes)} "
            f"for {need.what}, more than {where} holds ({_size(have)}); choose a smaller "
            f"task.{need.option}{others}")


def _sizes_above_defaults(cfg: TrainConfig, task_cls: type[Task]) -> list[str]:
    """The numeric settings of ``cfg`` set above their defaults (``task.digits=100000``):
    those that may have made a run too large for memory."""
    def larger(value: Any, default: Any) -> bool:
        numbers = (int, float)
        return (isinstance(value, numbers) and isinstance(default, numbers)
                and not isinstance(value, bool) and value > default)

    found = [f"task.{k}={v}" for k, v in cfg.task_args.items()
             if k in task_cls.options and larger(v, task_cls.options[k][1])]
    declared = {**COMMON, **(ENCODERS[cfg.model].options if cfg.model in ENCODERS else {})}
    model_defaults = {**{k: d for k, (_t, d) in declared.items()}, **task_cls.model_defaults}
    found += [f"model.{k}={v}" for k, v in cfg.model_args.items()
              if larger(v, model_defaults.get(k))]
    default_batch = task_cls.defaults.get("batch_size", TrainConfig().batch_size)
    if larger(cfg.batch_size, default_batch):
        found.append(f"batch_size={cfg.batch_size}")
    return found


def _out_of_memory_line(cfg: TrainConfig, task_cls: type[Task], device: torch.device,
                        asked: str, checkpoint_step: int | None, out: Path) -> str:
    """The one line of a run that ran out of memory while training."""
    suspects = _sizes_above_defaults(cfg, task_cls)
    which = (f"smaller values of the sizes set above their defaults ({', '.join(suspects)})"
             if suspects else "smaller model.* or task.* options, or a smaller batch_size")
    kept = (f"; {out / 'checkpoint.safetensors'} holds step {checkpoint_step}"
            if checkpoint_step is not None else "")
    return f"memory: training ran out of memory on {device} ({asked}); choose {which}{kept}"


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
