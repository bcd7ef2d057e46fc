"""The README is the product's face: short, code first, no lab notes, and its reproduction
table is the results files' (issue 75).

- at most 1,500 words (whitespace-separated, tables and code included);
- its first Python code block within its first 60 lines;
- no commit hashes and no dated measurements (those belong on the measurement pages);
- its reproduction table is the one :func:`ctrlrnn.reproduce.pages.readme_table` makes from
  the claims of docs/results/README.md, which ``ctrlrnn reproduce --pages-only`` writes from
  the results files (tests/reproduce checks that the committed pages regenerate identically);
- the two set-up commands stay as they are.
"""

from __future__ import annotations

import re
from pathlib import Path

from ctrlrnn.reproduce import pages

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
MAX_WORDS = 1500
FIRST_CODE_LINE = 60
#: a commit hash: 7 to 40 hex digits with at least one letter and one digit
_HASH = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
_DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


def test_at_most_1500_words() -> None:
    n = len(README.split())
    assert n <= MAX_WORDS, f"README.md has {n} words (at most {MAX_WORDS})"


def test_python_code_in_the_first_screen() -> None:
    lines = README.splitlines()
    first = next((i for i, line in enumerate(lines, 1) if line.strip() == "```python"), None)
    assert first is not None, "README.md has no ```python block"
    assert first <= FIRST_CODE_LINE, f"first Python code at line {first} (> {FIRST_CODE_LINE})"


def test_no_commit_hashes_or_dated_measurements() -> None:
    hashes = sorted(set(_HASH.findall(README)))
    assert not hashes, f"README.md names commit hashes: {hashes}"
    dates = sorted(set(_DATE.findall(README)))
    assert not dates, f"README.md carries dates: {dates} (measurements go on their pages)"


def test_the_two_commands() -> None:
    assert "bash scripts/run " in README and "bash scripts/test " in README
    block = README.split("## Two commands", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [ln.split("#")[0].strip() for ln in block.splitlines() if ln.strip()]
    assert commands == ["bash scripts/run", "bash scripts/test"], commands


def test_reproduction_table_is_generated_from_the_results() -> None:
    assert pages.README_START in README and pages.README_END in README, "markers missing"
    shown = README.split(pages.README_START, 1)[1].split(pages.README_END, 1)[0]
    summary = (ROOT / "docs" / "results" / "README.md").read_text(encoding="utf-8")
    claims = pages.summary_claims(summary)
    assert len(claims) >= 19, f"read {len(claims)} claims from docs/results/README.md"
    want = pages.readme_table(claims)
    got = [line for line in shown.splitlines() if line.strip()]
    assert got == want, ("README.md's reproduction table differs from the results; run "
                         "`ctrlrnn reproduce --pages-only`:\n" + "\n".join(want))


def test_every_experiment_of_the_results_has_a_row() -> None:
    from ctrlrnn.reproduce.experiments import EXPERIMENTS

    shown = README.split(pages.README_START, 1)[1].split(pages.README_END, 1)[0]
    summary = (ROOT / "docs" / "results" / "README.md").read_text(encoding="utf-8")
    titles = {title for _page, title, _claim, _v in pages.summary_claims(summary)}
    assert {e.title for e in EXPERIMENTS if e.claims} <= titles
    rows = [ln for ln in shown.splitlines() if ln.startswith("| [")]
    assert len(rows) == len({(p, t) for p, t, _c, _v in pages.summary_claims(summary)})


def test_update_readme_rewrites_only_between_the_markers(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nbefore\n{pages.README_START}\nold\n{pages.README_END}\nafter\n")
    claims = [("qrnn", "Copy task, 5 digits (appendix)", "LSTM beats QRNN", "reproduced"),
              ("qrnn", "Copy task, 5 digits (appendix)", "QRNN beats LSTM", "opposite")]
    assert pages.update_readme(readme, claims)
    text = readme.read_text()
    assert text.startswith("# x\n\nbefore\n") and text.endswith(f"{pages.README_END}\nafter\n")
    assert "old" not in text
    assert "| [QRNN](docs/results/qrnn.md) | Copy task, 5 digits | LSTM beats QRNN | " \
        "reproduced | 1 opposite |" in text
    plain = tmp_path / "other.md"
    plain.write_text("no markers\n")
    assert not pages.update_readme(plain, claims) and plain.read_text() == "no markers\n"
    assert not pages.update_readme(tmp_path / "absent.md", claims)
