"""Checkpoints in safetensors: written atomically, loaded without unpickling anything.

One file holds everything a run needs to continue exactly where it stopped:

* tensors — the model's ``state_dict`` (``model/<name>``), the optimizer's per-parameter
  state (``optim/<param index>/<name>``), the LR scheduler's tensors if any, and the RNG
  states of torch (``rng/torch``);
* JSON in the safetensors header metadata — the optimizer's scalars and param groups, the
  model's name of each optimizer index (restoring matches the state to the parameters by name,
  so a model that has since dropped a parameter the optimizer never updated still resumes
  exactly; files written before the names load by position), the scheduler's scalars, the
  Python and NumPy RNG states, the trainer's progress (step, epoch, position in the epoch,
  best metric...) and the run configuration.

Writing goes to a temporary file in the same directory (``.<name>.<pid>.<random>.tmp``), is
flushed to disk, then renamed over the target (``os.replace``), so a crash leaves either the old
checkpoint or the new one, never half a file. With ``keep_previous=True`` the checkpoint it
replaces is kept as ``<stem>.previous<suffix>``, and :func:`load_newest_intact` falls back to it
when the newest one is damaged. A writer killed before its rename leaves its temporary file
behind; :func:`remove_stale_temporaries` deletes those whose writer is gone.

**Integrity** (format ``ctrlrnn-checkpoint/2``). The metadata records a sha256 of every tensor
(its name, dtype, shape and raw bytes) and a sha256 of the rest of the metadata, serialised
canonically; :class:`Checkpoint` checks all of them on load, so a flipped bit or a NaN written
into the file is an error (:class:`CheckpointError`, naming the file and the tensor), not a
silently different model. Files of format ``ctrlrnn-checkpoint/1`` carry no checksums: they
still load, unverified (``Checkpoint.verified`` is then ``False``).

Loading uses :func:`safetensors.safe_open` and :func:`json.loads` only: no pickle, so loading
a checkpoint never runs code.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from ctrlrnn import files
from ctrlrnn.processes import pid_alive

FORMAT = "ctrlrnn-checkpoint/2"
#: the format before checksums: still loaded, without verification
FORMAT_V1 = "ctrlrnn-checkpoint/1"
#: the metadata field holding the checksums (not itself covered by the metadata checksum)
CHECKSUMS = "checksums"


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: unreadable, corrupt or of an unknown format.

    ``str(error)`` is one line, ``checkpoint: <path>: <what failed>``; ``path`` and ``reason``
    hold the two parts.
    """

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        self.path = Path(path)
        self.reason = _one_line(reason)
        super().__init__(f"checkpoint: {self.path}: {self.reason}")


class WeightsMismatch(CheckpointError):
    """A checkpoint whose weights do not fit the model: ``why`` names the first parameter
    that differs (missing, unexpected or of another shape) and how many more do."""

    def __init__(self, path: str | os.PathLike[str], why: str) -> None:
        self.why = why
        super().__init__(path, f"its weights do not fit the model: {why}")


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def tensor_digest(name: str, tensor: torch.Tensor) -> str:
    """Hex sha256 of a tensor's name, dtype, shape and raw (native-order) bytes."""
    t = tensor.detach().cpu().contiguous()
    digest = hashlib.sha256()
    digest.update(f"{name}\0{str(t.dtype).removeprefix('torch.')}\0{list(t.shape)}\0".encode())
    if t.numel():
        digest.update(t.reshape(-1).view(torch.uint8).numpy())
    return digest.hexdigest()


def metadata_digest(meta: dict[str, Any]) -> str:
    """Hex sha256 of the metadata without its checksums field, as canonical JSON.

    Non-finite numbers are digested as Python's ``json`` writes them (``NaN``): files written
    before the metadata was strict JSON hold them, and must still verify."""
    body = {k: v for k, v in meta.items() if k != CHECKSUMS}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


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


def _optimized_names(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> list[str | None]:
    """The model's name of each parameter the optimizer holds, in the optimizer's index order
    (its groups one after the other, as ``optimizer.state_dict()`` numbers them); None for a
    parameter the model does not hold."""
    names = {id(p): n for n, p in model.named_parameters(remove_duplicate=False)}
    return [names.get(id(p)) for g in optimizer.param_groups for p in g["params"]]


def _optimizer_state(
    optimizer: torch.optim.Optimizer, model: torch.nn.Module, tensors: dict[str, torch.Tensor]
) -> Any:
    sd = optimizer.state_dict()
    return {
        "state": _split_state("optim", {str(k): v for k, v in sd["state"].items()}, tensors),
        "param_groups": _to_jsonable(sd["param_groups"]),
        "param_names": _optimized_names(model, optimizer),
    }


def _optimizer_by_name(
    path: Path, saved: dict[str, Any], state: dict[int, Any], model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
) -> tuple[dict[int, Any], list[dict[str, Any]]]:
    """The saved optimizer state and groups renumbered to the optimizer's current indices by
    parameter name, so a model that dropped a parameter the optimizer never updated (no state:
    it never had a gradient), or registers its parameters in another order, resumes with every
    other parameter's state where it belongs.
    Checkpoints written before the names were recorded load by position, as they were saved."""
    groups = saved["param_groups"]
    before = saved.get("param_names")
    now = _optimized_names(model, optimizer)
    if before is None or None in before or None in now:
        return state, groups
    position = {n: i for i, n in enumerate(now)}
    for k in state:
        if before[k] not in position:
            raise CheckpointError(
                path, f"holds optimizer state for parameter {before[k]!r}, which the model does "
                "not have"
            )
    if len(groups) != len(optimizer.param_groups):
        raise CheckpointError(
            path, f"holds {len(groups)} optimizer parameter groups, the optimizer has "
            f"{len(optimizer.param_groups)}"
        )
    renumbered, start = [], 0
    for group, current in zip(groups, optimizer.param_groups, strict=True):
        indices = list(range(start, start + len(current["params"])))
        start += len(current["params"])
        kept = [before[i] for i in group["params"] if before[i] in position]
        if sorted(kept) != sorted(now[i] for i in indices):  # the order may differ
            raise CheckpointError(
                path, "the optimizer's parameters differ from the saved ones beyond parameters "
                f"without state (saved {kept}, now {[now[i] for i in indices]})"
            )
        renumbered.append({**group, "params": indices})
    return {position[before[k]]: v for k, v in state.items()}, renumbered


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
    keep_previous: bool = False,
) -> Path:
    """Write a checkpoint atomically (temporary file, fsync, rename). Returns its path.

    ``task_state``: what :meth:`ctrlrnn.tasks.base.Task.checkpoint_state` returned.
    ``keep_previous``: keep the checkpoint being replaced, as ``<stem>.previous<suffix>``
    (:func:`previous_path`). The new file is complete and on disk before anything is renamed, and
    ``path`` never goes missing (the old file is hard-linked to the previous name, then the new
    one renamed over ``path``; where hard links are not supported, the old file is renamed), so
    at every instant an intact checkpoint exists under one of the two names.
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
        meta["optimizer"] = _optimizer_state(optimizer, model, tensors)
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
    # Checksums: over the metadata as it will read back (a JSON round trip: strict JSON, a
    # non-finite number as null), and every tensor.
    meta = json.loads(files.dumps(meta))
    meta[CHECKSUMS] = {
        "algorithm": "sha256",
        "metadata": metadata_digest(meta),
        "tensors": {name: tensor_digest(name, tensors[name]) for name in sorted(tensors)},
    }
    with files.writing(path):
        fd, tmp = tempfile.mkstemp(prefix=_temporary_prefix(path), suffix=".tmp",
                                   dir=path.parent)
        os.close(fd)
        try:
            save_file(tensors, tmp, metadata={"ctrlrnn": files.dumps(meta)})
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
            if keep_previous and path.is_file():
                _keep_as_previous(path)
            os.replace(tmp, path)
            _fsync_dir(path.parent)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    return path


def stored_step(path: str | os.PathLike[str]) -> int | None:
    """The step the checkpoint at ``path`` holds, read from its header alone (no tensor is
    loaded or verified); None when there is no readable checkpoint there."""
    try:
        with safe_open(str(path), framework="pt") as fh:
            meta = json.loads((fh.metadata() or {}).get("ctrlrnn", "{}"))
        return int(meta["progress"]["step"])
    except Exception:  # noqa: BLE001 - any unreadable file: no step to name
        return None


def previous_path(path: str | os.PathLike[str]) -> Path:
    """Where ``save_checkpoint(path, keep_previous=True)`` keeps the checkpoint it replaced:
    ``checkpoint.safetensors`` -> ``checkpoint.previous.safetensors``."""
    path = Path(path)
    return path.with_name(f"{path.stem}.previous{path.suffix}")


def _temporary_prefix(path: Path) -> str:
    return f".{path.name}.{os.getpid()}."


def _fsync_dir(directory: Path) -> None:
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _keep_as_previous(path: Path) -> None:
    """Make ``previous_path(path)`` hold the current content of ``path``, keeping ``path``."""
    previous = previous_path(path)
    link = path.parent / f"{_temporary_prefix(previous)}{secrets.token_hex(4)}.tmp"
    try:
        os.link(path, link)
    except OSError:  # no hard links here: rename (``path`` is briefly absent, ``previous`` not)
        os.replace(path, previous)
        _fsync_dir(path.parent)
        return
    try:
        os.replace(link, previous)
    except BaseException:
        if os.path.lexists(link):
            os.unlink(link)
        raise
    _fsync_dir(path.parent)


#: ``.<target>.<pid>.<random>.tmp``: a temporary file of :func:`save_checkpoint`
_TEMP_WITH_PID = re.compile(r"^\.(?P<target>.+\.safetensors)\.(?P<pid>[0-9]+)\.[A-Za-z0-9_]+\.tmp$")
#: ``.<target>.<random>.tmp``: one written before temporary names carried the writer's PID
_TEMP_LEGACY = re.compile(r"^\.(?P<target>.+\.safetensors)\.[A-Za-z0-9_]+\.tmp$")
#: a legacy temporary file (no PID) older than this is taken as abandoned
LEGACY_TEMP_MAX_AGE_S = 600.0


def remove_stale_temporaries(directory: str | os.PathLike[str]) -> list[Path]:
    """Delete the temporary files that killed checkpoint writers left in ``directory``.

    A temporary file named ``.<name>.safetensors.<pid>.<random>.tmp`` is removed when no process
    ``<pid>`` is alive on this machine (one of a live process, ours included, is kept: it may be
    being written). One without a PID (``.<name>.safetensors.<random>.tmp``, written by an older
    version) is removed when it is empty or older than :data:`LEGACY_TEMP_MAX_AGE_S`. Only
    this directory is looked at, not its sub-directories; a file that vanishes meanwhile is
    skipped. Returns the paths removed. (PIDs are this machine's: do not share one directory
    between writers on several machines.)
    """
    directory = Path(directory)
    removed: list[Path] = []
    try:
        entries = list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return removed
    now = time.time()
    for entry in entries:
        name = entry.name
        if not name.endswith(".tmp"):
            continue
        try:
            if not entry.is_file(follow_symlinks=False):
                continue
            match = _TEMP_WITH_PID.match(name)
            if match is not None and int(match["pid"]) > 0:
                stale = not pid_alive(int(match["pid"]))
            elif _TEMP_LEGACY.match(name) is not None:
                st = entry.stat(follow_symlinks=False)
                stale = st.st_size == 0 or now - st.st_mtime > LEGACY_TEMP_MAX_AGE_S
            else:
                continue
            if stale:
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except FileNotFoundError:
            continue
    return removed


class Checkpoint:
    """A loaded checkpoint: tensors and metadata, read without unpickling, verified.

    Raises :class:`FileNotFoundError` when ``path`` is not a file, and :class:`CheckpointError`
    (a :class:`ValueError`) when it is empty, not safetensors, holds no ctrlrnn metadata or
    invalid JSON, is of an unknown format, or does not match its checksums (format ``/2``;
    ``/1`` files have none and load unverified: ``verified`` is ``False``).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"checkpoint: no such file {self.path}")
        try:
            size = self.path.stat().st_size
        except OSError as exc:
            raise CheckpointError(self.path, f"cannot be read ({exc.strerror or exc})") from None
        if size == 0:
            raise CheckpointError(self.path, "empty file")
        try:
            with safe_open(str(self.path), framework="pt") as fh:
                header = fh.metadata() or {}
                self.tensors = {k: fh.get_tensor(k) for k in fh.keys()}
        except Exception as exc:  # noqa: BLE001 - report which file is bad
            raise CheckpointError(
                self.path, f"not a readable safetensors file ({_one_line(exc)})"
            ) from None
        if "ctrlrnn" not in header:
            raise CheckpointError(self.path, "no ctrlrnn metadata")
        try:
            meta = json.loads(header["ctrlrnn"])
        except json.JSONDecodeError as exc:
            raise CheckpointError(
                self.path, f"the metadata is not valid JSON ({exc}); the file is corrupt"
            ) from None
        if not isinstance(meta, dict):
            raise CheckpointError(self.path, "the metadata is not a JSON object")
        self.meta: dict[str, Any] = meta
        fmt = meta.get("format")
        if fmt == FORMAT_V1:
            self.verified = False
        elif fmt == FORMAT:
            self._verify()
            self.verified = True
        else:
            raise CheckpointError(
                self.path, f"has format {fmt!r}, expected {FORMAT!r} (or {FORMAT_V1!r})"
            )

    def _verify(self) -> None:
        sums = self.meta.get(CHECKSUMS)
        if (
            not isinstance(sums, dict)
            or sums.get("algorithm") != "sha256"
            or not isinstance(sums.get("metadata"), str)
            or not isinstance(sums.get("tensors"), dict)
        ):
            raise CheckpointError(self.path, "the metadata holds no valid checksums (corrupt file)")
        if metadata_digest(self.meta) != sums["metadata"]:
            raise CheckpointError(
                self.path, "metadata does not match its checksum (the file is corrupt)"
            )
        expected: dict[str, Any] = sums["tensors"]
        missing = sorted(set(expected) - set(self.tensors))
        extra = sorted(set(self.tensors) - set(expected))
        if missing or extra:
            what = f"tensor {missing[0]} is missing" if missing else f"unexpected tensor {extra[0]}"
            raise CheckpointError(self.path, f"{what} (the file is corrupt)")
        bad = [n for n in sorted(expected) if tensor_digest(n, self.tensors[n]) != expected[n]]
        if bad:
            more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
            raise CheckpointError(
                self.path,
                f"tensor {bad[0]}{more} does not match its checksum (the file is corrupt)",
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

    def load_model_state(self, model: torch.nn.Module) -> None:
        """Load the weights into ``model`` strictly (as its ``load_state_dict`` reads them);
        :class:`WeightsMismatch` naming the first parameter that differs when they do not
        fit."""
        state = self.model_state()
        try:
            model.load_state_dict(state, strict=True)
        except RuntimeError as exc:
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            why = state_mismatch(model, state) or (lines[-1] if lines else type(exc).__name__)
            raise WeightsMismatch(self.path, why) from None

    def restore(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        scheduler: Any | None = None,
        *,
        rng: bool = True,
    ) -> None:
        """Load the model (strictly), and optionally the optimizer, scheduler and RNG states.

        Raises :class:`WeightsMismatch` naming the first parameter that differs when the
        weights do not fit ``model``."""
        self.load_model_state(model)
        if optimizer is not None:
            if "optimizer" not in self.meta:
                raise ValueError(f"checkpoint: {self.path} holds no optimizer state")
            opt = self.meta["optimizer"]
            state = _join_state(opt["state"], self.tensors)
            state, groups = _optimizer_by_name(self.path, opt,
                                               {int(k): v for k, v in state.items()},
                                               model, optimizer)
            try:
                optimizer.load_state_dict({"state": state, "param_groups": groups})
            except ValueError as exc:  # a checkpoint without names, of another model
                raise CheckpointError(
                    self.path, f"its optimizer state does not fit this model's parameters "
                    f"({exc}); resume it with the ctrlrnn version that wrote it"
                ) from exc
        if scheduler is not None and "scheduler" in self.meta:
            scheduler.load_state_dict(_join_state(self.meta["scheduler"], self.tensors))
        if rng:
            restore_rng(self.meta["rng"], self.tensors)


def state_mismatch(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> str | None:
    """How ``state`` (a ``state_dict``) differs from ``model``'s own, naming the first entry
    that differs (a missing or reshaped one before one the model lacks) and how many more do;
    None when the names and shapes agree. A model may still load a state that differs (one
    that drops a legacy entry as it loads), so this words a failed load; it does not predict
    one."""
    own = model.state_dict()
    problems: list[str] = []
    for name, tensor in own.items():
        if name not in state:
            problems.append(f"{name} (shape {list(tensor.shape)}) is missing from the checkpoint")
        elif tuple(state[name].shape) != tuple(tensor.shape):
            problems.append(f"{name} has shape {list(state[name].shape)} in the checkpoint, "
                            f"{list(tensor.shape)} in the model")
    problems += [f"{name} (shape {list(state[name].shape)}) is in the checkpoint, not in the "
                 "model" for name in state if name not in own]
    if not problems:
        return None
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return problems[0] + more


def load_newest_intact(path: str | os.PathLike[str]) -> tuple[Checkpoint, list[str]]:
    """The checkpoint at ``path`` if it loads and verifies, else its :func:`previous_path`.

    Returns the checkpoint and one line per file skipped, saying why. Raises
    :class:`FileNotFoundError` when neither file exists, and :class:`CheckpointError` naming
    both files and what failed in each when neither loads.
    """
    path = Path(path)
    previous = previous_path(path)
    skipped: list[str] = []
    failures: list[tuple[Path, str]] = []
    for candidate in (path, previous):
        if not candidate.is_file():
            skipped.append(f"checkpoint: no such file {candidate}")
            failures.append((candidate, "no such file"))
            continue
        try:
            return Checkpoint(candidate), skipped
        except CheckpointError as exc:
            skipped.append(str(exc))
            failures.append((candidate, exc.reason))
    if not path.is_file() and not previous.is_file():
        raise FileNotFoundError(f"checkpoint: no such file {path} (nor {previous})")
    (_, first), (_, second) = failures
    raise CheckpointError(path, f"{first}; and {previous}: {second}; no intact checkpoint left")
