"""Every benchmark result file a page cites is in the repository.

``bench-results/`` is ignored (``ctrlrnn bench`` writes a file there on every run), so a run
that a page is rendered from must be added with ``git add -f``; two Xeon runs that
BENCHMARKS.md was once rendered from were never committed, and that page could not be rendered
again. This test names every ``bench-results/<name>.json`` in the repository's markdown files
and asks git whether it is tracked (without git: whether it exists).
"""

from __future__ import annotations

import re
import subprocess

import pytest
from test_links import ROOT, markdown_files

_CITED = re.compile(r"\bbench-results/([A-Za-z0-9_.-]+\.json)\b")


def cited() -> dict[str, list[str]]:
    """``{file name: [page:line, ...]}`` for every result file a markdown page names."""
    found: dict[str, list[str]] = {}
    for md in markdown_files():
        for n, line in enumerate(md.read_text(encoding="utf-8").splitlines(), 1):
            for name in _CITED.findall(line):
                found.setdefault(name, []).append(f"{md.relative_to(ROOT)}:{n}")
    return found


def tracked() -> set[str] | None:
    """The names of the files git tracks under ``bench-results/`` (None: no git here)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--", "bench-results"], cwd=ROOT,
                             capture_output=True, check=True, timeout=30).stdout.decode()
    except (OSError, subprocess.SubprocessError):
        return None
    return {n.split("/", 1)[1] for n in out.split("\0") if n.startswith("bench-results/")}


def test_pages_cite_result_files() -> None:
    pages = {where.split(":")[0] for places in cited().values() for where in places}
    assert "BENCHMARKS.md" in pages, "BENCHMARKS.md names the result file it is rendered from"


def test_every_cited_result_file_is_committed() -> None:
    names = tracked()
    if names is None:  # an unpacked archive: the files must at least be there
        names = {p.name for p in (ROOT / "bench-results").glob("*.json")}
    if not names:
        pytest.fail("no result file under bench-results/ (the pages cite several)")
    missing = {name: where for name, where in cited().items() if name not in names}
    assert not missing, (
        "result files named by a page but not committed (bench-results/ is ignored: "
        f"git add -f them): {missing}")
