"""The pages a person reads are written one fact a sentence: the median sentence of README.md
and of every page of docs/*.md is under 20 words (issue 75). :mod:`prose` says what counts as
a sentence and as a word.

``benchmarks-xeon.md`` is a ``ctrlrnn bench`` page whose results file was never committed: its
numbers stay as they were rendered, and its prose was split into shorter sentences by hand.
"""

from __future__ import annotations

from pathlib import Path

import prose
import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_MEDIAN = 20
PAGES = ["README.md", *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", PAGES)
def test_median_sentence_under_20_words(page: str) -> None:
    text = (ROOT / page).read_text(encoding="utf-8")
    lengths = prose.lengths(text)
    assert lengths, f"{page}: no prose found"
    median = prose.median_length(text)
    longest = sorted(zip(lengths, prose.sentences(text)), reverse=True)[:3]
    assert median < MAX_MEDIAN, (f"{page}: median sentence {median} words (under {MAX_MEDIAN}); "
                                 "the longest: " + " | ".join(s[:120] for _, s in longest))


def test_sentences_and_words_are_counted_as_documented() -> None:
    text = "\n".join([
        "# A title is not prose",
        "",
        "One sentence here. Another one with `code spans count as one` word.",
        "A line that ends a sentence.",
        "then a lower-case start, after a line end.",
        "",
        "- A list item is a sentence",
        "- [a link](x.md) counts as its text",
        "",
        "| a | table |",
        "|---|---|",
        "",
        "```python",
        "x = 1  # code is not prose. Not at all.",
        "```",
        "",
        "    indented code. Not prose either.",
    ])
    assert prose.lengths(text) == [3, 5, 6, 8, 6, 6]
