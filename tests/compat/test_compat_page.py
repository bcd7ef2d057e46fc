"""``scripts/compat_check.py`` writes docs/compatibility.md from its records: rows in version
order, each backend's smoke counts, the span of versions that passed, and every failure."""

from __future__ import annotations

from script_modules import script_module


def _record(torch: str, python: str, **changes) -> dict:
    smoke = {"passed": 29, "failed": 0, "skipped": 0, "failures": [], "exit": 0}
    record = {"torch": torch, "python": python, "python_full": f"{python}.1", "date": "d",
              "commit": "c", "machine": "x86_64 Linux", "status": "pass",
              "build": {"ok": True, "seconds": 300.4}, "compiled": smoke,
              "reference": {**smoke, "passed": 16, "skipped": 13}}
    return {**record, **changes}


def test_the_page_lists_rows_in_version_order_and_every_failure() -> None:
    failing = {"passed": 28, "failed": 1, "skipped": 0, "failures": ["test_x: boom"], "exit": 1}
    records = [
        _record("2.15.0", "3.13"),
        _record("2.4.1", "3.10"),
        _record("2.10.0", "3.12", status="FAIL", compiled=failing),
        _record("2.9.0", "3.11", status="build failed",
                build={"ok": False, "seconds": 10.0, "error": "no compiler"}),
    ]
    with script_module("compat_check") as compat:
        page = compat.write_page(records)
    rows = [line for line in page.splitlines() if line.startswith("| 2.")]
    assert [row.split(" | ")[0] for row in rows] == ["| 2.4.1", "| 2.9.0", "| 2.10.0",
                                                       "| 2.15.0"]
    assert rows[0] == ("| 2.4.1 | 3.10.1 | compiled in 300 s | 29 passed | 16 passed, 13 "
                       "skipped | pass | d, c |")
    assert "| FAILED | 29 passed |" in rows[1]
    assert "28 passed, **1 failed** |" in rows[2]
    assert "Passed: torch 2.4.1 to 2.15.0." in page
    failures = page.split("## Failures", 1)[1].split("## Running the check", 1)[0]
    assert "- torch 2.10.0 / Python 3.12 (compiled): test_x: boom" in failures
    assert "- torch 2.9.0 / Python 3.11: build failed\n\n```\nno compiler\n```" in failures
    assert failures.count("- torch 2.9.0 / Python 3.11: build failed") == 2  # status, build
    assert "2.15.0" not in failures and "2.4.1" not in failures
