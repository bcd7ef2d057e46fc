"""SNLI / MultiNLI ``*.jsonl`` files (``sentence1``, ``sentence2``, ``gold_label``).

Unreachable here: supply e.g. ``snli_1.0_train.jsonl`` or ``multinli_1.0_train.jsonl``.
Examples whose ``gold_label`` is ``-`` (no annotator consensus) are skipped, as usual.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ctrlrnn.data.errors import DataFormatError

LABELS = {"entailment": 0, "neutral": 1, "contradiction": 2}


@dataclass(frozen=True)
class NliExample:
    premise: str
    hypothesis: str
    label: int
    genre: str | None = None


def read_nli_jsonl(path: str | Path) -> list[NliExample]:
    """Labelled pairs of a SNLI/MultiNLI jsonl file."""
    path = Path(path)
    out = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataFormatError(path, number, f"invalid JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise DataFormatError(path, number, "expected a JSON object")
            missing = [k for k in ("sentence1", "sentence2", "gold_label") if k not in row]
            if missing:
                raise DataFormatError(path, number, f"missing field {missing[0]!r}")
            gold = row["gold_label"]
            if gold == "-":
                continue
            if gold not in LABELS:
                raise DataFormatError(path, number, f"unknown gold_label {gold!r}")
            out.append(NliExample(str(row["sentence1"]), str(row["sentence2"]), LABELS[gold],
                                  row.get("genre")))
    return out
