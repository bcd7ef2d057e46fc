"""Answer selection files: WikiQA (``WikiQA-{train,dev,test}.tsv`` with a header row
``QuestionID Question DocumentID DocumentTitle SentenceID Sentence Label``) and TrecQA in
the common three-column ``question<TAB>answer<TAB>label`` form.

Unreachable here: supply the files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ctrlrnn.data.errors import DataFormatError

WIKIQA_HEADER = ("QuestionID", "Question", "DocumentID", "DocumentTitle", "SentenceID",
                 "Sentence", "Label")


@dataclass(frozen=True)
class QaPair:
    question_id: str
    question: str
    answer: str
    label: int


def _label(path: Path, number: int, value: str) -> int:
    if value not in ("0", "1"):
        raise DataFormatError(path, number, f"label must be 0 or 1, got {value!r}")
    return int(value)


def read_wikiqa(path: str | Path) -> list[QaPair]:
    path = Path(path)
    out = []
    with open(path, encoding="utf-8") as handle:
        header = handle.readline().rstrip("\n").split("\t")
        if tuple(header) != WIKIQA_HEADER:
            raise DataFormatError(path, 1, f"expected header {' '.join(WIKIQA_HEADER)}")
        for number, line in enumerate(handle, 2):
            if not line.strip():
                continue
            cols = line.rstrip("\n").split("\t")
            if len(cols) != len(WIKIQA_HEADER):
                raise DataFormatError(path, number, f"expected 7 columns, got {len(cols)}")
            out.append(QaPair(cols[0], cols[1], cols[5], _label(path, number, cols[6])))
    return out


def read_qa_tsv(path: str | Path) -> list[QaPair]:
    """``question<TAB>answer<TAB>label`` rows (TrecQA); questions are numbered in order of
    first appearance."""
    path = Path(path)
    ids: dict[str, str] = {}
    out = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            cols = line.rstrip("\n").split("\t")
            if len(cols) != 3:
                raise DataFormatError(path, number, f"expected 3 columns, got {len(cols)}")
            qid = ids.setdefault(cols[0], f"Q{len(ids)}")
            out.append(QaPair(qid, cols[0], cols[1], _label(path, number, cols[2])))
    return out


def group_by_question(pairs: list[QaPair]) -> dict[str, list[QaPair]]:
    """Candidates per question id, in file order."""
    groups: dict[str, list[QaPair]] = {}
    for pair in pairs:
        groups.setdefault(pair.question_id, []).append(pair)
    return groups
