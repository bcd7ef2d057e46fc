"""bAbI dialog tasks (Bordes et al., 2017): ``N user utterance<TAB>bot response`` lines,
knowledge-base lines ``N entity attribute value`` (no tab), dialogues separated by blank
lines. Unreachable here: supply e.g. ``dialog-babi-task1-API-calls-trn.txt``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ctrlrnn.data.errors import DataFormatError


@dataclass
class Dialog:
    """A dialog's (user, bot) turns and its knowledge-base lines.

    ``knowledge_turns``: for each knowledge-base line, how many turns precede it (bAbI prints
    the lines where an API call's results arrive); None places every line after the first
    ``api_call`` response.
    """

    turns: list[tuple[str, str]] = field(default_factory=list)
    knowledge: list[str] = field(default_factory=list)
    knowledge_turns: list[int] | None = None


def read_babi_dialog(path: str | Path) -> list[Dialog]:
    path = Path(path)
    dialogs: list[Dialog] = []
    current = Dialog()
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            line = line.rstrip("\n")
            if not line.strip():
                if current.turns or current.knowledge:
                    dialogs.append(current)
                current = Dialog()
                continue
            index, _, rest = line.partition(" ")
            if not index.isdigit():
                raise DataFormatError(path, number, "expected a line number first")
            if "\t" in rest:
                user, bot = rest.split("\t", 1)
                current.turns.append((user, bot))
            elif rest:
                current.knowledge.append(rest)
                if current.knowledge_turns is None:
                    current.knowledge_turns = []
                current.knowledge_turns.append(len(current.turns))
            else:
                raise DataFormatError(path, number, "empty utterance")
    if current.turns or current.knowledge:
        dialogs.append(current)
    return dialogs
