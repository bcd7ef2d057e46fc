"""Tokenisers: whitespace, word (regex, Unicode aware) and character level."""

from __future__ import annotations

import re

_WORD = re.compile(r"\w+(?:['’\-]\w+)*|[^\w\s]", re.UNICODE)


def whitespace_tokenize(text: str) -> list[str]:
    """Split on runs of whitespace (for pre-tokenised corpora such as PTB)."""
    return text.split()


def word_tokenize(text: str, lower: bool = False) -> list[str]:
    """Words (letters/digits, with inner apostrophes or hyphens) and single punctuation marks.

    >>> word_tokenize("Don't stop-loss, now!")
    ["Don't", 'stop-loss', ',', 'now', '!']
    """
    if lower:
        text = text.lower()
    return _WORD.findall(text)


def char_tokenize(text: str, space: str | None = "_") -> list[str]:
    """Characters of ``text``; runs of whitespace become one ``space`` token (or are kept
    verbatim as a single ``" "`` when ``space`` is ``None``)."""
    collapsed = " ".join(text.split())
    if space is None:
        return list(collapsed)
    return [space if ch == " " else ch for ch in collapsed]
