"""TREC question classification (Li & Roth): ``COARSE:fine question words ...`` per line.

Unreachable here: supply ``train_5500.label`` / ``TREC_10.label`` (Latin-1 encoded).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ctrlrnn.data.errors import DataFormatError

COARSE = ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM")


@dataclass(frozen=True)
class TrecQuestion:
    coarse: str
    fine: str
    tokens: tuple[str, ...]

    @property
    def coarse_label(self) -> int:
        return COARSE.index(self.coarse)


def read_trec(path: str | Path, encoding: str = "latin-1") -> list[TrecQuestion]:
    path = Path(path)
    out = []
    with open(path, encoding=encoding) as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            label, _, question = line.strip().partition(" ")
            coarse, sep, fine = label.partition(":")
            if not sep or coarse not in COARSE or not fine or not question.strip():
                raise DataFormatError(path, number, "expected 'COARSE:fine question'")
            out.append(TrecQuestion(coarse, fine, tuple(question.split())))
    return out
