"""The measurement pages lead with their answer (issue 75): BENCHMARKS.md's summary of each
unit's speed against torch's LSTMs, and the results summary's table of claims and verdicts,
begin within the first 40 lines of their pages; each results page opens with its claims."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctrlrnn.bench.benchmarks_page import SUMMARY_TARGETS
from ctrlrnn.reproduce.pages import SUMMARY_HEAD

ROOT = Path(__file__).resolve().parents[2]
WITHIN = 40


def _line_of(path: Path, start: str) -> int:
    lines = path.read_text(encoding="utf-8").splitlines()
    found = next((n for n, line in enumerate(lines, 1) if line.startswith(start)), None)
    assert found is not None, f"{path.relative_to(ROOT)}: no line starting {start!r}"
    return found


def test_benchmarks_summary_first() -> None:
    page = ROOT / "BENCHMARKS.md"
    head = _line_of(page, "| unit (point) | against | goal |")
    assert head <= WITHIN, f"BENCHMARKS.md's summary starts at line {head}"
    text = page.read_text(encoding="utf-8")
    rows = [ln for ln in text.splitlines()[head + 1:] if ln.startswith("| ")]
    assert len(rows) >= len(SUMMARY_TARGETS)
    assert text.index("## Summary") < text.index("## Method") < text.index("## Targets")
    assert "![Training speed against torch's LSTMs](docs/figures/benchmarks-speed.png)" in text
    assert (ROOT / "docs" / "figures" / "benchmarks-speed.png").is_file()


@pytest.mark.parametrize("page", ["docs/results/README.md", "docs/results/quick/README.md"])
def test_results_summary_first(page: str) -> None:
    head = _line_of(ROOT / page, SUMMARY_HEAD[0])
    assert head <= WITHIN, f"{page}: the summary table starts at line {head}"


@pytest.mark.parametrize("page", sorted(p.name for p in (ROOT / "docs" / "results").glob("*.md")
                                        if p.name != "README.md"))
def test_each_results_page_opens_with_its_claims(page: str) -> None:
    path = ROOT / "docs" / "results" / page
    head = _line_of(path, "| experiment | claim | paper's numbers (where) | ours | verdict |")
    first_section = _line_of(path, "### ")
    assert head < first_section and head <= 5, f"{page}: its claims start at line {head}"


def test_gpu_page_summary_first() -> None:
    """docs/gpu.md opens with each unit's speed against cuDNN, rendered from its results file,
    and the page on disk is what its generator renders from the committed results."""
    import json

    from ctrlrnn.bench.gpu_page import render_page, summary_rows

    page = ROOT / "docs" / "gpu.md"
    head = _line_of(page, "| unit | against | training speed-up | inference speed-up |")
    assert head <= WITHIN, f"docs/gpu.md's summary starts at line {head}"
    results = json.loads((ROOT / "bench-results" / "gpu-h100.json").read_text(encoding="utf-8"))
    assert page.read_text(encoding="utf-8") == render_page(results)
    units = [row[0] for row in summary_rows(results["bench"])]
    assert units[0] == "QRNN" and {"CAS-LSTM", "RCRN", "METAGROSS"} <= set(units)
