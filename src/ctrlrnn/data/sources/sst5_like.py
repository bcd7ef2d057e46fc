"""SST-5-like graded sentiment: Rotten Tomatoes snippets with mean human ratings.

Read from the source archive of PyPI ``vaderSentiment==3.3.2``
(``additional_resources/hutto_ICWSM_2014.tar.gz`` -> ``movieReviewSnippets_GroundTruth.txt``,
``id<TAB>score<TAB>text``, 10,605 snippets, score = mean rating in [-4, 4]).

Binning (documented, SST's own cut-offs): the score is mapped to ``x = (score + 4) / 8`` in
[0, 1] and binned like SST's sentiment values: [0, 0.2] -> 0 very negative,
(0.2, 0.4] -> 1 negative, (0.4, 0.6] -> 2 neutral, (0.6, 0.8] -> 3 positive,
(0.8, 1] -> 4 very positive. Texts are lower-cased and word-tokenised; duplicates kept once.

Split (fixed): :func:`~ctrlrnn.data.sources.common.hash_split` of the tokenised text.
"""

from __future__ import annotations

import tarfile
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

PACKAGE = PipPackage("vaderSentiment", "3.3.2", sdist=True)
MEMBER = "additional_resources/hutto_ICWSM_2014.tar.gz"
INNER = "hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt"
CLASS_NAMES = ("very negative", "negative", "neutral", "positive", "very positive")


def score_to_class(score: float) -> int:
    """Bin a [-4, 4] rating into 5 classes with SST's cut-offs on ``(score + 4) / 8``."""
    if not -4.0 <= score <= 4.0:
        raise ValueError(f"score must be in [-4, 4], got {score}")
    x = (score + 4.0) / 8.0
    for label, upper in enumerate((0.2, 0.4, 0.6, 0.8)):
        if x <= upper:
            return label
    return 4


def read_ground_truth(text: str, path: Path) -> list[tuple[float, str]]:
    """``(score, snippet)`` rows of a ``id<TAB>score<TAB>text`` file."""
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("\t", 2)
        try:
            score = float(parts[1])
        except (IndexError, ValueError):
            raise DataFormatError(path, number, "expected 'id<TAB>score<TAB>text'") from None
        if len(parts) < 3 or not -4.0 <= score <= 4.0:
            raise DataFormatError(path, number, "expected a score in [-4, 4] and a text")
        rows.append((score, parts[2]))
    return rows


class Sst5LikeSource(PreparedSource):
    name = "sst5-like"
    summary = "SST-5-like: 10.6k RT snippets, mean ratings binned into 5 classes"
    size = "10.6k snippets, 1.3 MB"
    origin = f"PyPI {PACKAGE.spec} (sdist)"
    licence = "MIT (vaderSentiment)"
    install = f"pip download --no-binary :all: --no-deps {PACKAGE.spec} must succeed"

    def build(self, work: Path, out: Path) -> None:
        archive = pip_files(PACKAGE, [MEMBER], work, self.name)[MEMBER]
        with tarfile.open(archive) as tf:
            handle = tf.extractfile(INNER)
            if handle is None:
                raise DataFormatError(archive, None, f"no {INNER}")
            text = handle.read().decode("utf-8")
        rows: dict[str, list[tuple[int, list[str]]]] = {s: [] for s in SPLITS}
        seen: set[str] = set()
        for score, snippet in read_ground_truth(text, archive / INNER):
            tokens = word_tokenize(snippet, lower=True)
            key = " ".join(tokens)
            if tokens and key not in seen:
                seen.add(key)
                rows[hash_split(key)].append((score_to_class(score), tokens))
        for split in SPLITS:
            write_labelled(out / f"{split}.tsv", rows[split])

    def compute_stats(self, out: Path) -> DatasetStats:
        splits, vocab = labelled_split_stats(out)
        counts = [0] * 5
        for label, _ in ((lab, t) for t, lab in read_labelled(out / "train.tsv")):
            counts[label] += 1
        return DatasetStats(
            self.name, splits, vocab, unit="words",
            extra={"train classes": ", ".join(f"{i} {n}: {c}" for i, (n, c) in
                                              enumerate(zip(CLASS_NAMES, counts, strict=True)))},
        )


SOURCE = Sst5LikeSource()


def load_sst5_like(cache_dir: CacheDir = None) -> dict[str, list[tuple[list[str], int]]]:
    """``(tokens, class 0..4)`` per split."""
    directory = SOURCE.ready_dir(cache_dir)
    return {s: read_labelled(directory / f"{s}.tsv") for s in SPLITS}
