"""Padding and length-bucketed batching.

A :class:`PaddedBatch` holds a batch-first ``LongTensor`` of token ids padded with ``pad_id``,
an ``int64`` tensor of lengths and a ``bool`` mask (``True`` on real tokens).
:func:`bucket_batches` groups examples of similar length so that little padding is needed.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch.utils.data import Sampler


@dataclass
class PaddedBatch:
    """Padded token ids ``(B, T)``, lengths ``(B,)`` and mask ``(B, T)``."""

    tokens: torch.Tensor
    lengths: torch.Tensor
    mask: torch.Tensor

    def to(self, device: torch.device | str) -> PaddedBatch:
        return PaddedBatch(self.tokens.to(device), self.lengths.to(device), self.mask.to(device))


def pad_sequences(
    sequences: Sequence[Sequence[int] | torch.Tensor],
    pad_id: int = 0,
    max_length: int | None = None,
) -> PaddedBatch:
    """Pad ``sequences`` (lists or 1-D tensors of ids) to a batch; ``max_length`` truncates."""
    if len(sequences) == 0:
        raise ValueError("sequences must not be empty")
    if max_length is not None and max_length < 1:
        raise ValueError(f"max_length must be >= 1, got {max_length}")
    rows = [torch.as_tensor(s, dtype=torch.long).reshape(-1) for s in sequences]
    if max_length is not None:
        rows = [r[:max_length] for r in rows]
    lengths = torch.tensor([len(r) for r in rows], dtype=torch.int64)
    width = int(lengths.max()) if len(rows) else 0
    tokens = torch.full((len(rows), width), pad_id, dtype=torch.long)
    for i, row in enumerate(rows):
        tokens[i, : len(row)] = row
    mask = torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)
    return PaddedBatch(tokens, lengths, mask)


def bucket_batches(
    lengths: Sequence[int],
    batch_size: int,
    shuffle: bool = True,
    seed: int = 0,
    bucket_factor: int = 50,
    drop_last: bool = False,
) -> list[list[int]]:
    """Batches of example indices of similar length.

    Indices are (optionally) shuffled, cut into pools of ``batch_size * bucket_factor``,
    each pool sorted by length and cut into batches; the batch order is then shuffled.
    Without ``shuffle`` the result is the indices sorted by length, in order.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if bucket_factor < 1:
        raise ValueError(f"bucket_factor must be >= 1, got {bucket_factor}")
    rng = random.Random(seed)
    order = list(range(len(lengths)))
    if shuffle:
        rng.shuffle(order)
        pool = batch_size * bucket_factor
        pools = [order[i : i + pool] for i in range(0, len(order), pool)]
    else:
        pools = [order]
    batches: list[list[int]] = []
    for chunk in pools:
        chunk = sorted(chunk, key=lambda i: lengths[i])
        batches.extend(chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size))
    if drop_last:
        batches = [b for b in batches if len(b) == batch_size]
    if shuffle:
        rng.shuffle(batches)
    return batches


class BucketBatchSampler(Sampler[list[int]]):
    """A ``batch_sampler`` for :class:`torch.utils.data.DataLoader` using
    :func:`bucket_batches`; call :meth:`set_epoch` to reshuffle each epoch."""

    def __init__(
        self,
        lengths: Sequence[int],
        batch_size: int,
        shuffle: bool = True,
        seed: int = 0,
        bucket_factor: int = 50,
        drop_last: bool = False,
    ) -> None:
        self.lengths = list(lengths)
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.bucket_factor = bucket_factor
        self.drop_last = drop_last
        self.epoch = 0
        bucket_batches(self.lengths[:1], batch_size, bucket_factor=bucket_factor)  # validate

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _batches(self) -> list[list[int]]:
        return bucket_batches(self.lengths, self.batch_size, self.shuffle,
                              self.seed + self.epoch, self.bucket_factor, self.drop_last)

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self._batches())

    def __len__(self) -> int:
        return len(self._batches())


def batchify_stream(ids: Sequence[int] | torch.Tensor, batch_size: int) -> torch.Tensor:
    """Cut a token stream into ``batch_size`` contiguous rows ``(batch_size, N)`` for language
    modelling (the tail that does not fill a row is dropped)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    data = torch.as_tensor(ids, dtype=torch.long).reshape(-1)
    per_row = data.numel() // batch_size
    if per_row == 0:
        raise ValueError(f"batch_size {batch_size} exceeds the stream length {data.numel()}")
    return data[: per_row * batch_size].view(batch_size, per_row)


def bptt_windows(
    rows: torch.Tensor, bptt: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield ``(inputs, targets)`` windows of at most ``bptt`` steps from ``(B, N)`` rows;
    targets are the inputs shifted by one step."""
    if bptt < 1:
        raise ValueError(f"bptt must be >= 1, got {bptt}")
    for start in range(0, rows.size(1) - 1, bptt):
        end = min(start + bptt, rows.size(1) - 1)
        yield rows[:, start:end], rows[:, start + 1 : end + 1]
