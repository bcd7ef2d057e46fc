"""Stanford Sentiment Treebank in PTB tree format (``trees/{train,dev,test}.txt``), one tree
per line: ``(3 (2 It) (4 (2 's) (3 good)))``.

Unreachable here: supply the ``trainDevTestTrees_PTB`` files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ctrlrnn.data.errors import DataFormatError


@dataclass
class SentimentTree:
    """A node: sentiment ``label`` 0..4 and either a ``word`` (leaf) or ``children``."""

    label: int
    word: str | None = None
    children: list[SentimentTree] = field(default_factory=list)

    def leaves(self) -> list[str]:
        if self.word is not None:
            return [self.word]
        return [w for c in self.children for w in c.leaves()]

    def binary_label(self) -> int | None:
        """0 (labels 0-1), 1 (labels 3-4) or ``None`` (neutral, dropped in SST-2)."""
        return 0 if self.label < 2 else 1 if self.label > 2 else None


def parse_tree(text: str) -> SentimentTree:
    """Parse one tree; ``ValueError`` (naming ``text``) when malformed."""
    tokens = text.replace("(", " ( ").replace(")", " ) ").split()
    pos = 0

    def node() -> SentimentTree:
        nonlocal pos
        if pos >= len(tokens) or tokens[pos] != "(":
            raise ValueError(f"text: expected '(' at token {pos}")
        pos += 1
        if pos >= len(tokens) or not tokens[pos].isdigit() or not 0 <= int(tokens[pos]) <= 4:
            raise ValueError(f"text: expected a label 0..4 at token {pos}")
        tree = SentimentTree(int(tokens[pos]))
        pos += 1
        if pos < len(tokens) and tokens[pos] not in "()":
            tree.word = tokens[pos]
            pos += 1
        else:
            while pos < len(tokens) and tokens[pos] == "(":
                tree.children.append(node())
            if not tree.children:
                raise ValueError(f"text: node without word or children at token {pos}")
        if pos >= len(tokens) or tokens[pos] != ")":
            raise ValueError(f"text: expected ')' at token {pos}")
        pos += 1
        return tree

    tree = node()
    if pos != len(tokens):
        raise ValueError(f"text: trailing tokens after position {pos}")
    return tree


def read_sst_trees(path: str | Path) -> list[SentimentTree]:
    """All trees of an SST PTB-format file (blank lines skipped)."""
    path = Path(path)
    trees = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                trees.append(parse_tree(line))
            except ValueError as exc:
                raise DataFormatError(path, number, str(exc)) from None
    return trees
