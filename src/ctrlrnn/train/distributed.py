"""Multi-process training with ``torch.distributed``, launched by ``torchrun``.

Each process takes an equal slice of every global batch; after backward the gradients are
averaged over processes with one ``all_reduce`` of a flat buffer, so every optimizer step equals
the single-process step on the whole global batch. gloo on CPU, nccl on GPU. When a process
fails, torchrun stops the others; a collective that waits on a dead peer fails after
``CTRLRNN_DIST_TIMEOUT`` seconds (default 120) with an error instead of hanging.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ctrlrnn.settings import SettingError, raw, raw_int, value
from ctrlrnn.train.config import DEVICE_PATTERN


@dataclass
class DistContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


#: environment variable that ``device = "auto"`` follows when set (cpu, cuda or cuda:N)
DEVICE_ENV = "CTRLRNN_DEVICE"


def resolve_device(device: str = "auto", local_rank: int = 0) -> torch.device:
    """The device of this process: ``device`` as configured (``auto``: ``$CTRLRNN_DEVICE`` when
    set, else CUDA when available, else CPU). Under torchrun a bare ``cuda`` means the GPU of
    this process's ``LOCAL_RANK``. Raises ValueError, naming ``device``, for a GPU that is not
    there."""
    name, source = device, ""
    if name == "auto":
        try:
            env = value(DEVICE_ENV)
        except SettingError:
            text = (raw(DEVICE_ENV) or "").strip()
            raise SettingError(f"device: expected auto, cpu, cuda or cuda:N, got {text!r} "
                               f"(from ${DEVICE_ENV})") from None
        if env is not None:
            name, source = env, f" (from ${DEVICE_ENV})"
    if not DEVICE_PATTERN.fullmatch(name):
        raise ValueError(f"device: expected auto, cpu, cuda or cuda:N, got {name!r}{source}")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ValueError(f"device: {name}{source} was asked for, but torch sees no CUDA device "
                         f"(torch {torch.__version__}); use device=cpu")  # fmt: skip
    index = int(name.split(":", 1)[1]) if ":" in name else local_rank
    count = torch.cuda.device_count()
    if index >= count:
        why = f"LOCAL_RANK {local_rank}" if ":" not in name else name
        raise ValueError(f"device: {why} needs GPU {index}, but {count} visible; run at most "
                         f"{count} process(es) per node, or set device=cpu")  # fmt: skip
    return torch.device("cuda", index)


def init_distributed(device: str = "auto") -> DistContext:
    """Join the process group described by torchrun's environment, or run alone, on the device
    :func:`resolve_device` picks (NCCL between GPUs, gloo between CPU processes)."""
    world = raw_int("WORLD_SIZE", 1)
    if world <= 1:
        return DistContext(device=resolve_device(device))
    rank = raw_int("RANK")
    local_rank = raw_int("LOCAL_RANK", 0)
    dev = resolve_device(device, local_rank)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    timeout = datetime.timedelta(seconds=value("CTRLRNN_DIST_TIMEOUT"))
    if not dist.is_initialized():
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", timeout=timeout)
    return DistContext(rank=rank, world_size=world, local_rank=local_rank, device=dev)


def average_gradients(params: list[torch.nn.Parameter], ctx: DistContext) -> None:
    """Average ``.grad`` over processes (one all_reduce of a flat buffer)."""
    if not ctx.enabled:
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    flat /= ctx.world_size
    offset = 0
    for p, g in zip(params, grads):
        n = g.numel()
        if p.grad is None:
            p.grad = flat[offset : offset + n].view_as(p).clone()
        else:
            p.grad.copy_(flat[offset : offset + n].view_as(p))
        offset += n


def mean_over_processes(value: float, ctx: DistContext) -> float:
    if not ctx.enabled:
        return value
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return float(t.item()) / ctx.world_size


def max_over_processes(value: float, ctx: DistContext) -> float:
    """The largest of every process's ``value`` (``value`` itself in a single process)."""
    if not ctx.enabled:
        return value
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def launched_world_size() -> int:
    """How many processes ``torchrun`` started for this run (``$WORLD_SIZE``; 1 alone)."""
    try:
        return max(1, raw_int("WORLD_SIZE", 1))
    except ValueError:
        return 1


def is_main_process() -> bool:
    """Whether this is the process that speaks for the run (rank 0, or the only one), read
    from ``torchrun``'s environment, so it holds before the process group is joined."""
    return (raw("RANK") or "0") == "0"


def check_batch_split(batch_size: int, world_size: int) -> None:
    """Refuse a global ``batch_size`` that ``world_size`` processes cannot share equally
    (ValueError naming ``batch_size`` and the divisors that would)."""
    if world_size <= 1 or batch_size % world_size == 0:
        return
    lower = batch_size - batch_size % world_size
    choices = " or ".join(str(n) for n in (lower, lower + world_size) if n > 0)
    raise ValueError(f"batch_size: {batch_size} cannot be split equally among the {world_size} "
                     f"processes torchrun started; choose a multiple of {world_size} "
                     f"(e.g. {choices})")


def barrier(ctx: DistContext) -> None:
    if ctx.enabled:
        dist.barrier()


def shutdown(ctx: DistContext) -> None:
    if ctx.enabled and dist.is_initialized():
        dist.destroy_process_group()
