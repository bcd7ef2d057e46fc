"""Checkpoints in safetensors: written atomically, loaded without unpickling anything.

One file holds everything a run needs to continue exactly where it stopped:

* tensors — the model's ``state_dict`` (``model/<name>``), the optimizer's per-parameter
  state (``optim/<param index>/<name>``), the LR scheduler's tensors if any, and the RNG
  states of torch (``rng/torch``);
* JSON in the safetensors header metadata — the optimizer's scalars and param groups, the
  scheduler's scalars, the Python and NumPy RNG states, the trainer's progress (step, epoch,
  position in the epoch, best metric...) and the run configuration.

Writing goes to a temporary file in the same directory, is flushed to disk, then renamed over
the target (``os.replace``), so a crash leaves either the old checkpoint or the new one, never
half a file. Loading uses :func:`safetensors.torch.load_file` and :func:`json.loads` only: no
pickle, so loading a checkpoint never runs code.
"""

from __future__ import annotations

import json
import os
import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file

FORMAT = "ctrlrnn-checkpoint/1"


def _to_jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_to_jsonable(v) for v in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, torch.Tensor) and obj.numel() == 1:
        return obj.item()
    raise TypeError(f"cannot store a {type(obj).__name__} in checkpoint metadata")


def _split_state(prefix: str, state: dict[str, Any], tensors: dict[str, torch.Tensor]) -> Any:
    """Move tensors of a nested state into ``tensors``; return the rest, JSON-able."""
    out: dict[str, Any] = {}
    for key, value in state.items():
        name = f"{prefix}/{key}"
        if isinstance(value, torch.Tensor):
            tensors[name] = value.detach().cpu().contiguous()
            out[str(key)] = {"__tensor__": name}
        elif isinstance(value, dict):
            out[str(key)] = _split_state(name, value, tensors)
        else:
            out[str(key)] = _to_jsonable(value)
    return out


def _join_state(meta: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(meta, dict):
        if set(meta) == {"__tensor__"}:
            return tensors[meta["__tensor__"]]
        return {k: _join_state(v, tensors) for k, v in meta.items()}
    return meta


def _optimizer_state(optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor]) -> Any:
    sd = optimizer.state_dict()
    return {
        "state": _split_state("optim", {str(k): v for k, v in sd["state"].items()}, tensors),
        "param_groups": _to_jsonable(sd["param_groups"]),
    }


def rng_state(tensors: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Capture the torch, Python and NumPy RNG states (the torch one goes into ``tensors``)."""
    tensors["rng/torch"] = torch.get_rng_state()
    np_state = np.random.get_state()
    py_state = random.getstate()
    return {
        "python": [py_state[0], list(py_state[1]), py_state[2]],
        "numpy": [np_state[0], np_state[1].tolist(), *[_to_jsonable(x) for x in np_state[2:]]],
    }


def restore_rng(meta: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
    torch.set_rng_state(tensors["rng/torch"])
    py = meta["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    npm = meta["numpy"]
    np.random.set_state((npm[0], np.asarray(npm[1], dtype=np.uint32), *npm[2:]))


def save_checkpoint(
    path: str | os.PathLike[str],
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any | None = None,
    *,
    progress: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
    task_state: tuple[dict[str, Any], dict[str, torch.Tensor]] | None = None,
) -> Path:
    """Write a checkpoint atomically (temporary file, fsync, rename). Returns its path.

    ``task_state``: what :meth:`ctrlrnn.tasks.base.Task.checkpoint_state` returned.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors: dict[str, torch.Tensor] = {}
    for name, value in model.state_dict().items():
        tensors[f"model/{name}"] = value.detach().cpu().contiguous()
    meta: dict[str, Any] = {
        "format": FORMAT,
        "progress": _to_jsonable(progress or {}),
        "config": _to_jsonable(config or {}),
        "rng": rng_state(tensors),
    }
    if optimizer is not None:
        meta["optimizer"] = _optimizer_state(optimizer, tensors)
    if scheduler is not None:
        meta["scheduler"] = _split_state("sched", scheduler.state_dict(), tensors)
    if task_state is not None:
        meta["task_state"] = _to_jsonable(task_state[0])
        for name, t in task_state[1].items():
            tensors[f"task/{name}"] = t.detach().cpu().contiguous()
    # safetensors refuses tensors sharing memory; clone any that alias another.
    seen: dict[int, str] = {}
    for name, t in list(tensors.items()):
        ptr = t.untyped_storage().data_ptr() if t.numel() else -1
        if ptr in seen and ptr != -1:
            tensors[name] = t.clone()
        seen[ptr] = name
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        save_file(tensors, tmp, metadata={"ctrlrnn": json.dumps(meta)})
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


class Checkpoint:
    """A loaded checkpoint: tensors and metadata, read without unpickling."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"checkpoint: no such file {self.path}")
        try:
            with safe_open(str(self.path), framework="pt") as fh:
                header = fh.metadata() or {}
                self.tensors = {k: fh.get_tensor(k) for k in fh.keys()}
        except Exception as exc:  # noqa: BLE001 - report which file is bad
            raise ValueError(
                f"checkpoint: {self.path} is not a readable safetensors file: {exc}"
            ) from exc
        if "ctrlrnn" not in header:
            raise ValueError(f"checkpoint: {self.path} has no ctrlrnn metadata")
        self.meta: dict[str, Any] = json.loads(header["ctrlrnn"])
        if self.meta.get("format") != FORMAT:
            raise ValueError(
                f"checkpoint: {self.path} has format {self.meta.get('format')!r}, "
                f"expected {FORMAT!r}"
            )

    @property
    def progress(self) -> dict[str, Any]:
        return self.meta.get("progress", {})

    @property
    def config(self) -> dict[str, Any]:
        return self.meta.get("config", {})

    def task_state(self) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        """The task's carried state (see :meth:`ctrlrnn.tasks.base.Task.checkpoint_state`)."""
        tensors = {k[len("task/") :]: v for k, v in self.tensors.items() if k.startswith("task/")}
        return self.meta.get("task_state", {}), tensors

    def model_state(self) -> dict[str, torch.Tensor]:
        return {k[len("model/") :]: v for k, v in self.tensors.items() if k.startswith("model/")}

    def restore(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        scheduler: Any | None = None,
        *,
        rng: bool = True,
    ) -> None:
        """Load the model (strictly), and optionally the optimizer, scheduler and RNG states."""
        model.load_state_dict(self.model_state(), strict=True)
        if optimizer is not None:
            if "optimizer" not in self.meta:
                raise ValueError(f"checkpoint: {self.path} holds no optimizer state")
            opt = self.meta["optimizer"]
            state = _join_state(opt["state"], self.tensors)
            groups = opt["param_groups"]
            optimizer.load_state_dict(
                {"state": {int(k): v for k, v in state.items()}, "param_groups": groups}
            )
        if scheduler is not None and "scheduler" in self.meta:
            scheduler.load_state_dict(_join_state(self.meta["scheduler"], self.tensors))
        if rng:
            restore_rng(self.meta["rng"], self.tensors)
