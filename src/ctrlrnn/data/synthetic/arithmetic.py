"""Copy and addition of decimal numbers (QRNN paper, appendix).

Both are sequence-to-sequence tasks over characters on *unaligned, variable-length* numbers:
each number has a length drawn uniformly from ``1..max_digits`` digits (no leading zero
unless it is ``0``).

* copy: ``"23532" -> "23532"``
* addition: ``"73952+9462" -> "83414"``
"""

from __future__ import annotations

import random

from ctrlrnn.data.source import SyntheticTask
from ctrlrnn.data.stats import DatasetStats
from ctrlrnn.data.synthetic.common import Seq2SeqExample, seq2seq_stats, unique_splits

DEFAULT_SIZES = {"train": 10_000, "valid": 1_000, "test": 1_000}


def random_number(rng: random.Random, max_digits: int) -> str:
    """A decimal number of ``1..max_digits`` digits (length uniform), without leading zero."""
    length = rng.randint(1, max_digits)
    if length == 1:
        return str(rng.randint(0, 9))
    return str(rng.randint(1, 9)) + "".join(str(rng.randint(0, 9)) for _ in range(length - 1))


def _check_digits(max_digits: int) -> None:
    if max_digits < 1:
        raise ValueError(f"max_digits must be >= 1, got {max_digits}")


def copy_example(rng: random.Random, max_digits: int) -> Seq2SeqExample:
    number = random_number(rng, max_digits)
    return Seq2SeqExample(tuple(number), tuple(number))


def addition_example(rng: random.Random, max_digits: int) -> Seq2SeqExample:
    a, b = random_number(rng, max_digits), random_number(rng, max_digits)
    return Seq2SeqExample(tuple(f"{a}+{b}"), tuple(str(int(a) + int(b))))


def copy_splits(
    max_digits: int = 5, sizes: dict[str, int] | None = None, seed: int = 0
) -> dict[str, list[Seq2SeqExample]]:
    """Disjoint train/valid/test splits of the copy task."""
    _check_digits(max_digits)
    return unique_splits(lambda r: copy_example(r, max_digits), sizes or DEFAULT_SIZES, seed,
                         key=lambda e: e.source)


def addition_splits(
    max_digits: int = 5, sizes: dict[str, int] | None = None, seed: int = 0
) -> dict[str, list[Seq2SeqExample]]:
    """Disjoint train/valid/test splits of the addition task (default 100k train as in the
    paper)."""
    _check_digits(max_digits)
    default = {"train": 100_000, "valid": 5_000, "test": 5_000}
    return unique_splits(lambda r: addition_example(r, max_digits), sizes or default, seed,
                         key=lambda e: e.source)


class CopyTask(SyntheticTask):
    name = "copy"
    summary = "copy a variable-length decimal number (QRNN appendix), chars, 5 digits"
    size = "generated: 10k/1k/1k"

    def default_stats(self) -> DatasetStats:
        return seq2seq_stats(self.name, copy_splits())


class AdditionTask(SyntheticTask):
    name = "addition"
    summary = "add two unaligned n-digit numbers '73952+9462'->'83414' (QRNN appendix)"
    size = "generated: 100k/5k/5k"

    def default_stats(self) -> DatasetStats:
        return seq2seq_stats(self.name, addition_splits())
