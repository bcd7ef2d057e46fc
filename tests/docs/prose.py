"""Measuring prose: the sentences of a markdown page and their lengths in words.

Prose is what a person reads as sentences: paragraphs and list items. Headings, tables, HTML
lines, images, indented and fenced code blocks are not prose. In prose, a code span counts as
one word and a link as its text. A sentence ends at ``.``, ``!`` or ``?`` at the end of a line, or
followed by a space and a capital letter, a digit, a code span, emphasis or a bracket; each
list item ends one too.
Words are runs of letters and digits (with the punctuation inside them: ``2.4.1``, ``fwd+bwd``).
"""

from __future__ import annotations

import re
import statistics

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_ITEM = re.compile(r"^\s{0,3}(?:[-*+]|\d+[.)])\s+")
_CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S)
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_SPLIT = re.compile(r"(?<=[.!?])[*_)\"']*(?:[ \t]*\n\s*|\s+(?=[A-Z0-9`*_(\[\"]))")
_WORD = re.compile(r"[A-Za-z0-9][\w'’.,+/%-]*")


def paragraphs(text: str) -> list[str]:
    """The prose blocks of a markdown page, each a paragraph or a list item, its lines
    stripped."""
    out: list[str] = []
    block: list[str] = []
    fence: str | None = None

    def close() -> None:
        if block:
            out.append("\n".join(block))
            block.clear()

    for line in text.splitlines():
        m = _FENCE.match(line)
        if fence is None and m:
            close()
            fence = m.group(1)
            continue
        if fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            continue
        stripped = line.strip()
        if (not stripped or stripped.startswith(("#", "|", "<", "![", ">"))
                or (line.startswith("    ") and not block)):
            close()
            continue
        if _ITEM.match(line):
            close()
            stripped = _ITEM.sub("", line).strip()
        block.append(stripped)
    close()
    return out


def sentences(text: str) -> list[str]:
    """The sentences of a page's prose, code spans as one word and links as their text."""
    found: list[str] = []
    for para in paragraphs(text):
        para = _CODE_SPAN.sub("CODE", para)
        para = _LINK.sub(r"\1", para)
        found += [s for s in _SPLIT.split(para) if words(s)]
    return found


def words(sentence: str) -> int:
    return len(_WORD.findall(sentence))


def lengths(text: str) -> list[int]:
    return [words(s) for s in sentences(text)]


def median_length(text: str) -> float:
    found = lengths(text)
    return statistics.median(found) if found else 0.0
