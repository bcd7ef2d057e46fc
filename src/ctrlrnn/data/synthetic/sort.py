"""Sorting integer sequences (METAGROSS section 3.1, task 1): ``9 1 10 5 3 -> 1 3 5 9 10``.

A sequence has a length drawn uniformly from ``min_length..max_length`` (``n`` in the
paper's table is ``max_length``: 5 or 10) and values uniform in ``1..max_value``
(duplicates allowed). Tokens are the decimal values.
"""

from __future__ import annotations

import random

from ctrlrnn.data.source import SyntheticTask
from ctrlrnn.data.stats import DatasetStats
from ctrlrnn.data.synthetic.common import Seq2SeqExample, seq2seq_stats, unique_splits

DEFAULT_SIZES = {"train": 10_000, "valid": 1_000, "test": 1_000}


def sort_example(
    rng: random.Random, max_length: int, min_length: int = 2, max_value: int = 100
) -> Seq2SeqExample:
    length = rng.randint(min_length, max_length)
    values = [rng.randint(1, max_value) for _ in range(length)]
    return Seq2SeqExample(tuple(map(str, values)), tuple(map(str, sorted(values))))


def sort_splits(
    max_length: int = 10,
    sizes: dict[str, int] | None = None,
    seed: int = 0,
    min_length: int = 2,
    max_value: int = 100,
) -> dict[str, list[Seq2SeqExample]]:
    """Disjoint train/valid/test splits of the sorting task."""
    if min_length < 1:
        raise ValueError(f"min_length must be >= 1, got {min_length}")
    if max_length < min_length:
        raise ValueError(f"max_length must be >= min_length ({min_length}), got {max_length}")
    if max_value < 1:
        raise ValueError(f"max_value must be >= 1, got {max_value}")
    return unique_splits(lambda r: sort_example(r, max_length, min_length, max_value),
                         sizes or DEFAULT_SIZES, seed, key=lambda e: e.source)


class SortTask(SyntheticTask):
    name = "sort"
    summary = "sort a sequence of integers (METAGROSS 3.1), n=10, values 1..100"
    size = "generated: 10k/1k/1k"

    def default_stats(self) -> DatasetStats:
        return seq2seq_stats(self.name, sort_splits())
