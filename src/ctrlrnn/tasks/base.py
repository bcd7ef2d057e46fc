"""What a training task provides to the trainer.

A task owns its data (built or loaded in :meth:`Task.setup`), builds its model around any
encoder by name, yields the training batches of an epoch in a deterministic order (a function
of the seed and the epoch only, so a resumed run sees the same batches), computes the training
loss of a batch, and evaluates a split into named metrics.

Batches are built on the CPU; they reach the model's device through :meth:`Task.to_device`:
the trainer moves each training batch, and each :meth:`Task.evaluate` moves the batches it
builds (``ctrlrnn train`` sets :attr:`Task.device` to where it put the model).
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

Batch = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class MemoryNeed:
    """An estimate of the memory a task's work needs, made from its options alone (before any
    data is generated or loaded), so that a run too large for the machine is refused at once.

    ``option``: the ``task.*`` option that sets it; ``also``: other keys that scale it (named
    in the refusal); ``on_device``: on the model's device (else in host memory)."""

    option: str
    bytes: int
    what: str
    on_device: bool
    also: tuple[str, ...] = ()


def move_to(value: Any, device: torch.device) -> Any:
    """``value`` with every tensor in it (nested dicts, lists, tuples, named tuples and
    dataclasses such as :class:`~ctrlrnn.data.batching.PaddedBatch`) on ``device``; everything
    else as it is. Copies from the CPU are asynchronous."""
    if isinstance(value, Tensor):
        return value if value.device == device else value.to(device, non_blocking=True)
    if isinstance(value, dict):
        return {k: move_to(v, device) for k, v in value.items()}
    if isinstance(value, list):
        return [move_to(v, device) for v in value]
    if isinstance(value, tuple):
        moved = [move_to(v, device) for v in value]
        return type(value)(*moved) if hasattr(value, "_fields") else tuple(moved)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: move_to(getattr(value, f.name), device)
                                             for f in dataclasses.fields(value) if f.init})
    return value


class Task(ABC):
    """Base class of the tasks behind ``ctrlrnn train --task NAME``."""

    name: ClassVar[str]
    description: ClassVar[str]
    #: the validation metric used for early stopping and the best checkpoint
    metric: ClassVar[str]
    higher_is_better: ClassVar[bool]
    #: task options: ``{name: (type, default)}`` (given as ``task.NAME=value``)
    options: ClassVar[dict[str, tuple[Any, Any]]] = {}
    #: configuration defaults for this task (overridable by the user)
    defaults: ClassVar[dict[str, Any]] = {}
    #: encoder option defaults for this task (``model.*``, overridable by the user)
    model_defaults: ClassVar[dict[str, Any]] = {}

    def __init__(self, options: dict[str, Any], seed: int) -> None:
        self.opts = options
        self.seed = seed
        #: the model's device: where :meth:`to_device` puts batches
        self.device = torch.device("cpu")

    def to_device(self, batch: Any) -> Any:
        """``batch`` (a :data:`Batch`, or anything holding tensors) on :attr:`device`."""
        return move_to(batch, self.device)

    def setup(self) -> None:  # noqa: B027 - optional hook; tasks without data to load skip it
        """Load or generate the data (called once, before the model is built)."""

    def data_summary(self) -> dict[str, Any]:
        """Facts about the data for the report (sizes of splits, vocabulary...)."""
        return {}

    def memory_needs(self, batch_size: int) -> list[MemoryNeed]:
        """Estimates, from the options alone, of the memory the data and a training batch of
        ``batch_size`` examples (one process's share) need; none by default."""
        return []

    @abstractmethod
    def build_model(self, encoder: str, model_args: dict[str, Any]) -> nn.Module:
        """The task model with encoder ``encoder`` built from ``model_args``."""

    @abstractmethod
    def train_batches(self, epoch: int, batch_size: int) -> Sequence[Batch]:
        """The training batches of ``epoch``, in an order fixed by (seed, epoch)."""

    @abstractmethod
    def loss(self, model: nn.Module, batch: Batch) -> Tensor:
        """Mean training loss of ``batch`` (a scalar tensor with grad)."""

    @abstractmethod
    def evaluate(self, model: nn.Module, split: str, max_batches: int = 0) -> dict[str, float]:
        """Metrics of ``model`` on ``split`` (``"valid"`` or ``"test"``); includes ``metric``."""

    def checkpoint_state(self) -> tuple[dict[str, Any], dict[str, Tensor]]:
        """State the task carries between steps (JSON-able part, tensors), for checkpoints.

        Most tasks carry none; a language model carries its BPTT state across windows.
        """
        return {}, {}

    def restore_state(self, meta: dict[str, Any], tensors: dict[str, Tensor]) -> None:
        """Inverse of :meth:`checkpoint_state` (called when a run is resumed)."""
        if meta or tensors:
            raise ValueError(f"checkpoint: task {self.name!r} carries no state to restore")

    def shard(self, batch: Batch, rank: int, world_size: int) -> Batch:
        """The slice of a global batch that process ``rank`` of ``world_size`` trains on."""
        if world_size == 1:
            return batch
        out: Batch = {}
        for key, value in batch.items():
            if isinstance(value, Tensor) and value.dim() > 0:
                n = value.shape[0]
                if n % world_size:
                    raise ValueError(
                        f"batch_size: {n} is not divisible by the number of processes {world_size}"
                    )
                step = n // world_size
                out[key] = value[rank * step : (rank + 1) * step]
            else:
                out[key] = value
        return out

    def epoch_generator(self, epoch: int) -> torch.Generator:
        """A generator seeded by (seed, epoch): the only randomness in the data order."""
        return torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
