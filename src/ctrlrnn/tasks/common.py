"""Pieces shared by the classification, pair, ranking, language-model, pixel and music tasks:
data-source options, pre-trained vectors, length-bucketed epochs and accuracy evaluation."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ctrlrnn.data.batching import bucket_batches
from ctrlrnn.data.sources.common import SPLITS
from ctrlrnn.data.sources.glove import GloveVectors, load_glove
from ctrlrnn.data.vocab import Vocab


def source_dir(value: str, option: str = "task.source") -> Path | None:
    """``None`` for ``""`` (use the prepared data set), else an existing directory."""
    if not value:
        return None
    path = Path(value).expanduser()
    if not path.is_dir():
        raise ValueError(f"{option}: no such directory {path}")
    return path


def require_files(directory: Path, names: Sequence[str], option: str = "task.source") -> None:
    """Refuse (naming ``option``) a directory that lacks one of ``names``."""
    for name in names:
        if not (directory / name).is_file():
            raise ValueError(f"{option}: {directory} has no {name}")


def read_glove_text(path: Path) -> GloveVectors:
    """Vectors in GloVe's own text format: one word a line, then its numbers, separated by
    spaces (the dimension is the first line's; a word may hold spaces, as a few of
    ``glove.840B.300d.txt``'s do: the last ``dim`` fields are the vector)."""
    words: list[str] = []
    rows: list[list[float]] = []
    dim = 0
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            fields = line.rstrip("\r\n").rstrip(" ").split(" ")
            if not line.strip():
                continue
            dim = dim or len(fields) - 1
            if dim < 1 or len(fields) < dim + 1:
                raise ValueError(f"task.glove: {path}:{number}: expected a word and {dim or 'its'} "
                                 "numbers")
            try:
                rows.append([float(x) for x in fields[-dim:]])
            except ValueError as exc:
                raise ValueError(f"task.glove: {path}:{number}: {exc}") from None
            words.append(" ".join(fields[:-dim]))
    if not words:
        raise ValueError(f"task.glove: {path} holds no vectors")
    return GloveVectors(words, np.asarray(rows, dtype=np.float32))


def load_vectors(value: str) -> GloveVectors | None:
    """``task.glove``: ``""`` none, ``"cache"`` the prepared ``glove`` source, a directory in
    its prepared form (``words.txt``, one word per line, and ``vectors.npy`` of the same rows),
    or a file in GloVe's text format (:func:`read_glove_text`: e.g. ``glove.840B.300d.txt``)."""
    if not value:
        return None
    if value == "cache":
        return load_glove()
    path = Path(value).expanduser()
    if path.is_file():
        return read_glove_text(path)
    if not path.is_dir():
        raise ValueError("task.glove: expected '', 'cache', a directory or a GloVe text file, "
                         f"got {value!r}")
    require_files(path, ["words.txt", "vectors.npy"], "task.glove")
    words = (path / "words.txt").read_text(encoding="utf-8").split("\n")
    if words and words[-1] == "":
        words.pop()
    vectors = np.load(path / "vectors.npy", allow_pickle=False)
    if vectors.ndim != 2:
        raise ValueError(f"task.glove: {path / 'vectors.npy'} is not a 2-D matrix")
    return GloveVectors(words, vectors)


def embedding_matrix(vectors: GloveVectors | None, vocab: Vocab, seed: int
                     ) -> torch.Tensor | None:
    """The pre-trained matrix for ``vocab`` (rows of words without a vector drawn from
    ``N(0, 0.1)`` with ``seed``), or ``None`` without vectors."""
    if vectors is None:
        return None
    return vectors.lookup(vocab, seed=seed)[0]


def epoch_batches(
    lengths: Sequence[int], batch_size: int, generator: torch.Generator, split: str = "train"
) -> list[list[int]]:
    """Full, length-bucketed batches of example indices in an order fixed by ``generator``."""
    if len(lengths) < batch_size:
        raise ValueError(
            f"batch_size: {batch_size} is larger than the {split} set ({len(lengths)} examples)"
        )
    seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator))
    return bucket_batches(lengths, batch_size, shuffle=True, seed=seed, drop_last=True)


def eval_chunks(lengths: Sequence[int], size: int, max_batches: int = 0) -> list[list[int]]:
    """Evaluation batches: indices sorted by length, cut into ``size`` (at most
    ``max_batches`` of them when positive)."""
    if size < 1:
        raise ValueError(f"task.eval_batch_size: expected a positive integer, got {size}")
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    chunks = [order[k : k + size] for k in range(0, len(order), size)]
    return chunks[:max_batches] if max_batches else chunks


def check_splits(splits: dict[str, Sequence[Any]], name: str) -> None:
    for split in SPLITS:
        if not splits.get(split):
            raise ValueError(f"{name}: the {split} split is empty")
