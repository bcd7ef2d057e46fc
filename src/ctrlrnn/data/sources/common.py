"""Helpers shared by the real sources: fixed hash splits and the prepared text formats."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from pathlib import Path

from ctrlrnn.data.errors import DataFormatError
from ctrlrnn.data.stats import SplitStats, split_stats

SPLITS: tuple[str, ...] = ("train", "valid", "test")


def hash_split(key: str) -> str:
    """Fixed split of an example by the sha1 of ``key``: last hex digit mod 10 = 0 -> test,
    1 -> valid, otherwise train (an 80/10/10 split that never depends on file order)."""
    bucket = int(hashlib.sha1(key.encode("utf-8")).hexdigest(), 16) % 10
    return "test" if bucket == 0 else "valid" if bucket == 1 else "train"


def write_labelled(path: Path, rows: Iterable[tuple[int, Sequence[str]]]) -> None:
    """One example per line: ``label<TAB>space-separated tokens``."""
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        for label, tokens in rows:
            handle.write(f"{label}\t{' '.join(tokens)}\n")


def read_labelled(path: Path) -> list[tuple[list[str], int]]:
    """Inverse of :func:`write_labelled`: ``(tokens, label)`` per line."""
    out = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            label, sep, text = line.rstrip("\n").partition("\t")
            if not sep or not label.lstrip("-").isdigit():
                raise DataFormatError(path, number, "expected 'label<TAB>tokens'")
            out.append((text.split(), int(label)))
    return out


def write_lines(path: Path, sequences: Iterable[Sequence[str]]) -> None:
    """One space-joined token sequence per line."""
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        for tokens in sequences:
            handle.write(" ".join(tokens) + "\n")


def read_lines(path: Path) -> list[list[str]]:
    with open(path, encoding="utf-8") as handle:
        return [line.split() for line in handle]


def labelled_split_stats(out: Path) -> tuple[list[SplitStats], int]:
    """Stats of ``{split}.tsv`` files and the vocabulary size of the train split."""
    splits, vocab = [], set()
    for split in SPLITS:
        rows = read_labelled(out / f"{split}.tsv")
        splits.append(split_stats(split, [tokens for tokens, _ in rows]))
        if split == "train":
            vocab = {t for tokens, _ in rows for t in tokens}
    return splits, len(vocab)
