"""docs/reproduction.md's total compute and its rows' training minutes are the results files'.

The summary (docs/results/README.md) is regenerated with the pages; docs/reproduction.md's
table of experiments is prose around the same numbers and is edited by hand when results
land. This keeps the two equal.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "reproduction.md"


def _minutes(text: str, pattern: str) -> float:
    found = re.search(pattern, text.replace("\n", " "))
    assert found, f"no match for {pattern!r}"
    return float(found.group(1))


def test_total_equals_the_results_summary() -> None:
    summary = (ROOT / "docs" / "results" / "README.md").read_text(encoding="utf-8")
    page = PAGE.read_text(encoding="utf-8")
    want = _minutes(summary, r"Training time of the experiments in these files: ([\d.]+) minutes")
    got = _minutes(page, r"All the results files now hold, searches included, ([\d.]+) minutes")
    hours = _minutes(page, r"[\d.]+ minutes \(([\d.]+) hours\) of training")
    assert got == want, f"docs/reproduction.md says {got} minutes, docs/results/README.md {want}"
    assert abs(hours - want / 60) < 0.051, f"its {hours} hours is not {want} minutes"


def test_rows_training_minutes_are_their_pages() -> None:
    """Each row of the table ends with its experiment's training minutes, by hand too."""
    pages = "\n".join(
        page.read_text(encoding="utf-8") for page in (ROOT / "docs" / "results").glob("*.md")
    )
    on_pages = {float(m) for m in re.findall(r"^Training time: ([\d.]+) minutes", pages, re.M)}
    text = PAGE.read_text(encoding="utf-8")
    rows = re.findall(r"^\| (.{0,60}).*\| ([\d.]+) min \|[ \t]*$", text, re.M)
    assert len(rows) >= 19, f"found {len(rows)} results rows in docs/reproduction.md"
    stale = [(row, float(minutes)) for row, minutes in rows if float(minutes) not in on_pages]
    assert not stale, f"rows whose training minutes no results page gives: {stale}"
