"""IWSLT parallel text: line-aligned ``train.tags.de-en.{de,en}`` (metadata lines starting
with ``<`` are skipped) and ``IWSLT*.{dev,tst}*.xml`` files (``<seg id=..>`` contents).

Unreachable here: supply the two files of a language pair.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

from ctrlrnn.data.errors import DataFormatError

_SEG = re.compile(r"<seg\b[^>]*>(.*?)</seg>")


def read_iwslt_side(path: str | Path) -> list[tuple[int, str]]:
    """``(line number, sentence)`` of one side: plain/``train.tags`` text or an xml file."""
    path = Path(path)
    out = []
    xml = path.suffix == ".xml"
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            text = line.strip()
            if xml:
                match = _SEG.search(text)
                if match:
                    out.append((number, html.unescape(match.group(1).strip())))
                elif "<seg" in text:
                    raise DataFormatError(path, number, "unterminated <seg>")
            elif text and not text.startswith("<"):
                out.append((number, text))
    return out


def read_parallel(source: str | Path, target: str | Path) -> list[tuple[str, str]]:
    """Sentence pairs of two aligned files; unequal lengths raise an error naming the longer
    file and its first unmatched line."""
    src, tgt = read_iwslt_side(source), read_iwslt_side(target)
    if len(src) != len(tgt):
        longer, rows = (source, src) if len(src) > len(tgt) else (target, tgt)
        raise DataFormatError(longer, rows[min(len(src), len(tgt))][0],
                              f"{len(src)} source vs {len(tgt)} target sentences")
    return [(s, t) for (_, s), (_, t) in zip(src, tgt, strict=True)]
