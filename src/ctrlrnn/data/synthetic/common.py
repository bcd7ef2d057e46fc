"""Pieces shared by the synthetic task generators."""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from ctrlrnn.data.stats import DatasetStats, split_stats

T = TypeVar("T")


@dataclass(frozen=True)
class Seq2SeqExample:
    """A source token sequence and the target sequence the model must produce."""

    source: tuple[str, ...]
    target: tuple[str, ...]


def check_sizes(sizes: dict[str, int]) -> None:
    for split, size in sizes.items():
        if size < 0:
            raise ValueError(f"sizes[{split!r}] must be >= 0, got {size}")


def unique_splits(
    draw: Callable[[random.Random], T],
    sizes: dict[str, int],
    seed: int,
    key: Callable[[T], Hashable] = lambda x: x,  # type: ignore[return-value]
    max_tries_factor: int = 50,
) -> dict[str, list[T]]:
    """Draw distinct examples (by ``key``) and deal them into splits of ``sizes``.

    Splits are disjoint by construction. Raises ``ValueError`` (naming ``sizes``) when the
    generator cannot produce that many distinct examples.
    """
    check_sizes(sizes)
    rng = random.Random(seed)
    total = sum(sizes.values())
    seen: set[Hashable] = set()
    examples: list[T] = []
    tries = 0
    while len(examples) < total:
        tries += 1
        if tries > max_tries_factor * total + 1000:
            raise ValueError(
                f"sizes: only {len(examples)} distinct examples found for {total} requested; "
                "ask for fewer or widen the task"
            )
        example = draw(rng)
        k = key(example)
        if k not in seen:
            seen.add(k)
            examples.append(example)
    out: dict[str, list[T]] = {}
    start = 0
    for split, size in sizes.items():
        out[split] = examples[start : start + size]
        start += size
    return out


def seq2seq_stats(name: str, splits: dict[str, Sequence[Seq2SeqExample]]) -> DatasetStats:
    """Stats over source sequences; vocabulary over source and target tokens."""
    vocab = {t for examples in splits.values() for e in examples for t in (*e.source, *e.target)}
    return DatasetStats(
        name,
        [split_stats(split, [e.source for e in examples]) for split, examples in splits.items()],
        len(vocab),
        unit="source tokens",
    )
