"""benchmarks/gpu_scan_overhead.py runs every part end to end at tiny shapes on the CPU, under
Triton's interpreter (its timings mean nothing there; a GPU session runs it for real), and writes
each part's results."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ctrlrnn import settings

# (looked up, not imported: Triton reads TRITON_INTERPRET when imported, and tests/gpu's
# conftest sets it before Triton is first imported in the worker)
pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                reason="triton is not installed (pip install ctrlrnn[gpu])")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_scan_overhead.py"


def test_every_part_runs_and_is_written(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--tiny", "1,4,16", "--shape", "1,8,16",
         "--calls", "3", "--repeats", "1", "--pairs", "1", "--blocks", "16:1", "--steps", "4",
         "--out", str(out)],
        capture_output=True, text=True, timeout=600, check=False,
        env=settings.child_environment(TRITON_INTERPRET="1", OMP_NUM_THREADS="1"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    res = json.loads(out.read_text())
    for part in ("overhead_us", "handoff_us", "profile", "big", "trace", "sweep"):
        assert part in res, part
    assert set(res["handoff_us"]) == {"op", "bare"}
    assert res["sweep"] and all("error" not in row for row in res["sweep"])


@pytest.mark.parametrize("count", ["--calls", "--pairs", "--repeats"])
def test_a_count_below_one_is_refused_naming_it_before_any_part_runs(tmp_path: Path,
                                                                      count: str) -> None:
    out = tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", count, "0", "--out", str(out)],
        capture_output=True, text=True, timeout=600, check=False,
        env=settings.child_environment(TRITON_INTERPRET="1", OMP_NUM_THREADS="1"),
    )
    assert done.returncode == 2, done.stderr[-3000:]
    assert f"{count}: expected a positive count, got 0" in done.stderr
    assert not out.exists()
