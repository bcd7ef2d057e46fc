"""IMDB reviews in the ``aclImdb/`` layout of Maas et al. (2011): ``{train,test}/{pos,neg}/*.txt``.

Unreachable here: download ``aclImdb_v1.tar.gz`` elsewhere, unpack it, and pass the path
of the ``aclImdb`` folder.
"""

from __future__ import annotations

from pathlib import Path

from ctrlrnn.data.errors import DataFormatError

LABELS = {"neg": 0, "pos": 1}


def read_imdb(root: str | Path, split: str = "train") -> list[tuple[str, int]]:
    """``(text, label)`` pairs (label 1 = positive), files in name order; ``<br />`` tags
    become spaces."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    root = Path(root)
    out: list[tuple[str, int]] = []
    for folder, label in LABELS.items():
        directory = root / split / folder
        if not directory.is_dir():
            raise DataFormatError(directory, None, "missing folder (expected aclImdb layout)")
        for path in sorted(directory.glob("*.txt")):
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError as exc:
                raise DataFormatError(path, 1, f"not UTF-8 ({exc.reason})") from None
            if not text.strip():
                raise DataFormatError(path, 1, "empty review")
            out.append((" ".join(text.replace("<br />", " ").split()), label))
    return out
