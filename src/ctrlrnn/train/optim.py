"""Optimizers and learning-rate schedules the papers used."""

from __future__ import annotations

from collections.abc import Iterable

import torch

OPTIMIZERS = ("adam", "rmsprop", "sgd", "adadelta", "adamw")


def build_optimizer(
    name: str,
    params: Iterable[torch.nn.Parameter],
    *,
    lr: float,
    weight_decay: float = 0.0,
    momentum: float = 0.0,
) -> torch.optim.Optimizer:
    """``adam`` / ``adamw`` / ``rmsprop`` (alpha 0.9, eps 1e-8 as the QRNN paper, section
    3.1) / ``sgd`` / ``adadelta``."""
    params = list(params)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    if name == "rmsprop":
        return torch.optim.RMSprop(
            params, lr=lr, alpha=0.9, eps=1e-8, weight_decay=weight_decay, momentum=momentum
        )
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    if name == "adadelta":
        return torch.optim.Adadelta(params, lr=lr, weight_decay=weight_decay)
    raise ValueError(f"optimizer: expected one of {OPTIMIZERS}, got {name!r}")


def epoch_decay_factor(epoch: int, decay: float, start_epoch: int) -> float:
    """Multiplicative LR factor for ``epoch`` (0-based): 1 until ``start_epoch``, then
    ``decay ** (epoch - start_epoch + 1)`` (the "lr 1 for six epochs, then x0.95 per epoch"
    schedule of the QRNN paper, section 3.2 is ``decay=0.95, start_epoch=6``)."""
    if decay == 1.0 or epoch < start_epoch:
        return 1.0
    return decay ** (epoch - start_epoch + 1)
