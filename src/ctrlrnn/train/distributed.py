"""Multi-process training with ``torch.distributed``, launched by ``torchrun``.

Each process takes an equal slice of every global batch; after backward the gradients are
averaged over processes with one ``all_reduce`` of a flat buffer, so every optimizer step equals
the single-process step on the whole global batch. gloo on CPU, nccl on GPU. When a process
fails, torchrun stops the others; a collective that waits on a dead peer fails after
``CTRLRNN_DIST_TIMEOUT`` seconds (default 120) with an error instead of hanging.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


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


def init_distributed() -> DistContext:
    """Join the process group described by torchrun's environment, or run alone."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
        return DistContext(device=device)
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available()
    if use_cuda:
        torch.cuda.set_device(local_rank)
    timeout = datetime.timedelta(seconds=float(os.environ.get("CTRLRNN_DIST_TIMEOUT", "120")))
    if not dist.is_initialized():
        dist.init_process_group("nccl" if use_cuda else "gloo", timeout=timeout)
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    return DistContext(rank=rank, world_size=world, local_rank=local_rank, device=device)


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


def barrier(ctx: DistContext) -> None:
    if ctx.enabled:
        dist.barrier()


def shutdown(ctx: DistContext) -> None:
    if ctx.enabled and dist.is_initialized():
        dist.destroy_process_group()
