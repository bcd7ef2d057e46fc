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

import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ctrlrnn import files
from ctrlrnn.data.errors import DataError
from ctrlrnn.metric_conventions import format_metrics
from ctrlrnn.models.encoders import encoder_options
from ctrlrnn.options import ConfigError, check_options
from ctrlrnn.tasks import task_class
from ctrlrnn.tasks.base import Task
from ctrlrnn.train.config import TrainConfig, load_config
from ctrlrnn.train.distributed import init_distributed, shutdown
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
    """
    # the trainer's progress bar and checkpoints need the `train` extra (rich, safetensors): the
    # `ctrlrnn` command imports this module, through its parser, without it
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
            task.device = ctx.device
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
