"""Run configuration: a typed dataclass, filled from a TOML file and ``key=value`` overrides.

Every key is checked before any work starts: an unknown key, or a value of the wrong type,
is refused with a message naming it. Encoder options go under ``model.`` (``model.hidden_size
=128``), task options under ``task.`` (``task.digits=3``); their names and types are declared by
the encoder and task registries.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctrlrnn.models.encoders import COMMON, ENCODERS
from ctrlrnn.options import ConfigError, check_options, coerce
from ctrlrnn.tasks import TASKS, task_class
from ctrlrnn.train.optim import OPTIMIZERS
from ctrlrnn.train.precision import precision_dtype

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = [
    "DEVICE_PATTERN",
    "HELP",
    "MAX_SEED",
    "METRIC_PATTERN",
    "THREADS_PER_CPU",
    "ConfigError",
    "SameInEveryProcess",
    "TrainConfig",
    "check_options",
    "coerce",
    "load_config",
    "model_help",
    "parse_overrides",
    "usable_cpus",
]


#: the values of the ``device`` key
DEVICE_PATTERN = re.compile(r"auto|cpu|cuda(:[0-9]+)?")
#: a validation metric's name, as the tasks report them (``loss``, ``token_accuracy``)
METRIC_PATTERN = re.compile(r"[a-z][a-z0-9_]*")
#: the largest seed: the data order's generator takes ``seed * 1_000_003 + epoch`` (under
#: 2**64), and NumPy's legacy seeding takes 32 bits
MAX_SEED = 2**32 - 1
#: ``threads`` may be at most this many times the CPUs the process may run on (more threads
#: than that only slow a run down, and torch crashes on some huge counts)
THREADS_PER_CPU = 4


class SameInEveryProcess(ConfigError):
    """A configuration refused the same way by every process of a ``torchrun`` launch (it
    depends on the configuration and the data alone): the main process says it."""


@dataclass
class TrainConfig:
    """Everything that defines a training run (see ``ctrlrnn train --help``)."""

    task: str = ""
    model: str = ""
    out: str = ""
    seed: int = 0
    epochs: int = 1
    max_steps: int = 0
    batch_size: int = 32
    optimizer: str = "adam"
    lr: float = 1e-3
    weight_decay: float = 0.0
    momentum: float = 0.0
    lr_decay: float = 1.0
    lr_decay_start: int = 0
    clip_norm: float = 5.0
    eval_every: int = 0
    eval_batches: int = 0
    checkpoint_every: int = 50
    log_every: int = 10
    patience: int = 0
    monitor: str = ""
    threads: int = 0
    device: str = "auto"
    precision: str = "fp32"
    model_args: dict[str, Any] = field(default_factory=dict)
    task_args: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def model_help() -> str:
    """The help of the ``model`` key: every encoder's name (the registered units'
    included)."""
    return "encoder name: " + ", ".join(ENCODERS)


HELP: dict[str, str] = {
    "task": "task name (ctrlrnn train --help lists them)",
    "model": model_help(),
    "out": "output directory (default runs/TASK-MODEL-seedN)",
    "seed": "random seed (data order, initialisation, dropout)",
    "epochs": "number of passes over the training data",
    "max_steps": "stop after this many optimizer steps (0: no limit)",
    "batch_size": "global batch size (split across processes under torchrun)",
    "optimizer": "adam, adamw, rmsprop, sgd or adadelta",
    "lr": "learning rate",
    "weight_decay": "L2 weight decay",
    "momentum": "momentum (sgd, rmsprop)",
    "lr_decay": "multiply the learning rate by this each epoch from lr_decay_start on",
    "lr_decay_start": "first epoch (0-based) at which lr_decay applies",
    "clip_norm": "clip the gradient norm to this (0: off)",
    "eval_every": "evaluate every N steps (0: at the end of each epoch)",
    "eval_batches": "limit every evaluation, the final one included, to N batches (0: all)",
    "checkpoint_every": "write a checkpoint every N steps (and at each evaluation)",
    "log_every": "log training loss every N steps",
    "patience": "early stopping: evaluations without improvement of the monitored metric (0: off)",
    "monitor": "the validation metric that drives early stopping and the best checkpoint, e.g. "
               "loss ('': the task's metric; loss and perplexity: lower is better; an equal "
               "value with a lower validation loss counts as an improvement)",
    "threads": "torch intra-op threads (0: default)",
    "device": "auto, cpu, cuda or cuda:N (auto: $CTRLRNN_DEVICE if set, else cuda when available)",
    "precision": "fp32, or bf16 / fp16: each training step's forward pass under torch.autocast "
                 "on the device (fp16 with a gradient scaler), weights and optimizer in float32, "
                 "evaluations in float32",
}


def usable_cpus() -> int:
    """How many CPUs this process may run on (its affinity where the system has one)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # pragma: no cover - macOS, Windows
        return os.cpu_count() or 1


def parse_overrides(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"{item}: expected key=value")
        key, value = item.split("=", 1)
        out[key.strip()] = value.strip()
    return out


def load_config(
    path: str | Path | None, overrides: dict[str, Any], base: dict[str, Any] | None = None
) -> TrainConfig:
    """Build a :class:`TrainConfig` from ``base`` values, a TOML file, then overrides.

    ``model.X`` / ``task.X`` keys (or ``[model]`` / ``[task]`` TOML tables) go to
    ``model_args`` / ``task_args``; they are type-checked later by the registries.
    """
    values: dict[str, Any] = dict(base or {})
    model_args: dict[str, Any] = {}
    task_args: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config: no such file {p}")
        try:
            data = tomllib.loads(p.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config: {p} is not valid TOML: {exc}") from exc
        for key, value in data.items():
            if key == "model" and isinstance(value, dict):
                model_args.update(value)
            elif key == "task" and isinstance(value, dict):
                task_args.update(value)
            else:
                values[key] = value
    for key, value in overrides.items():
        if key.startswith("model."):
            model_args[key[len("model.") :]] = value
        elif key.startswith("task."):
            task_args[key[len("task.") :]] = value
        else:
            values[key] = value
    hints = typing.get_type_hints(TrainConfig)
    fields = {f.name for f in dataclasses.fields(TrainConfig)} - {"model_args", "task_args"}
    checked: dict[str, Any] = {}
    for key, value in values.items():
        if key not in fields:
            known = ", ".join(sorted(fields))
            raise ConfigError(f"{key}: unknown configuration key{_suggestion(key, fields)} "
                              f"(known: {known}; the model's and task's options are written "
                              "model.KEY and task.KEY)")
        checked[key] = coerce(key, value, hints[key])
    cfg = TrainConfig(**checked, model_args=model_args, task_args=task_args)
    _check_ranges(cfg)
    return cfg


def _suggestion(key: str, fields: set[str]) -> str:
    """``; did you mean model.hidden_size?`` for a model or task option given without its
    prefix, or a close configuration key; empty when nothing is close."""
    model_keys = {*COMMON, *(k for spec in ENCODERS.values() for k in spec.options)}
    task_keys = {k for name in TASKS for k in task_class(name).options}
    if key in model_keys:
        return f"; did you mean model.{key}?"
    if key in task_keys:
        return f"; did you mean task.{key}?"
    candidates = {*fields, *(f"model.{k}" for k in model_keys), *(f"task.{k}" for k in task_keys)}
    close = difflib.get_close_matches(key, sorted(candidates), n=1, cutoff=0.75)
    return f"; did you mean {close[0]}?" if close else ""


def _check_ranges(cfg: TrainConfig) -> None:
    positive = ("epochs", "batch_size", "log_every", "checkpoint_every")
    for key in positive:
        if getattr(cfg, key) < 1:
            raise ConfigError(f"{key}: expected a positive integer, got {getattr(cfg, key)}")
    non_negative = ("max_steps", "eval_every", "eval_batches", "patience", "threads",
                    "lr_decay_start", "seed")
    for key in non_negative:
        if getattr(cfg, key) < 0:
            raise ConfigError(f"{key}: expected an integer >= 0, got {getattr(cfg, key)}")
    for key in ("lr", "weight_decay", "momentum", "clip_norm"):
        if getattr(cfg, key) < 0:
            raise ConfigError(f"{key}: expected a number >= 0, got {getattr(cfg, key)}")
    if cfg.seed > MAX_SEED:
        raise ConfigError(f"seed: expected an integer from 0 to {MAX_SEED}, got {cfg.seed}")
    cpus = usable_cpus()
    if cfg.threads > THREADS_PER_CPU * cpus:
        raise ConfigError(f"threads: expected at most {THREADS_PER_CPU * cpus} "
                          f"({THREADS_PER_CPU} per CPU; this process may use {cpus}), "
                          f"got {cfg.threads}")
    if cfg.optimizer not in OPTIMIZERS:
        raise ConfigError(f"optimizer: expected one of {', '.join(OPTIMIZERS)}, "
                          f"got {cfg.optimizer!r}")
    if not 0 < cfg.lr_decay <= 1:
        raise ConfigError(f"lr_decay: expected a number in (0, 1], got {cfg.lr_decay}")
    if cfg.monitor and not METRIC_PATTERN.fullmatch(cfg.monitor):
        raise ConfigError(f"monitor: expected a metric name such as loss, got {cfg.monitor!r}")
    if not DEVICE_PATTERN.fullmatch(cfg.device):
        raise ConfigError(f"device: expected auto, cpu, cuda or cuda:N, got {cfg.device!r}")
    precision_dtype(cfg.precision)
