"""README's total compute is the one the results summary sums from the results files.

The summary (docs/results/README.md) is regenerated with the pages; README's sentence is prose
around the same number and is edited by hand when results land. This keeps the two equal.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _minutes(text: str, pattern: str) -> float:
    found = re.search(pattern, text.replace("\n", " "))
    assert found, f"no match for {pattern!r}"
    return float(found.group(1))


def test_readme_total_equals_the_results_summary() -> None:
    summary = (ROOT / "docs" / "results" / "README.md").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    want = _minutes(summary, r"Training time of the experiments in these files: ([\d.]+) minutes")
    got = _minutes(readme, r"All the results files now hold, searches included, ([\d.]+) minutes")
    hours = _minutes(readme, r"[\d.]+ minutes \(([\d.]+) hours\) of training")
    assert got == want, f"README says {got} minutes, docs/results/README.md {want}"
    assert abs(hours - want / 60) < 0.051, f"README's {hours} hours is not {want} minutes"


def test_readme_rows_training_minutes_are_their_pages() -> None:
    """Each results row of README ends with its experiment's training minutes, by hand too."""
    pages = "\n".join(
        page.read_text(encoding="utf-8") for page in (ROOT / "docs" / "results").glob("*.md")
    )
    on_pages = {float(m) for m in re.findall(r"^Training time: ([\d.]+) minutes", pages, re.M)}
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (.{0,60}).*\| ([\d.]+) min \|[ \t]*$", readme, re.M)
    assert len(rows) >= 19, f"found {len(rows)} results rows in README"
    stale = [(row, float(minutes)) for row, minutes in rows if float(minutes) not in on_pages]
    assert not stale, f"README rows whose training minutes no results page gives: {stale}"
